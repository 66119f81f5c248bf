package import TPMKeychain

/// A store directory plus the TPM chosen for it (``StoreTPM``: the library's one policy), for
/// the length of one command.
///
/// ``close()`` erases the store's keys from memory and stops a simulated TPM; every command closes
/// its session on every path, errors and interruptions included.
package final class StoreSession {
    package let path: String
    package let tpm: StoreTPM
    package let location: KeychainLocation
    private let interruptionToken: Int
    /// Whether the store existed when the session began: one this command created is checked for
    /// rollback protection when the session closes.
    private let existedBefore: Bool

    /// - Parameters:
    ///   - choice: ``TPMChoice/automaticOrSimulated`` for commands that may create a store.
    ///   - announceSimulation: say on stderr when a simulated TPM stands in for the hardware;
    ///     commands whose own output says so turn it off.
    package convenience init(
        path: String, choice: TPMChoice = .automaticOrSimulated, announceSimulation: Bool = true
    ) throws {
        try self.init(
            path: path, at: try KeychainLocation(path: path), choice: choice, announceSimulation: announceSimulation)
    }

    /// - Parameter found: the location of `path`, made once: each location made from a path
    ///   resolves its symbolic links again.
    private init(path: String, at found: KeychainLocation, choice: TPMChoice, announceSimulation: Bool) throws {
        self.path = path
        existedBefore = found.storeExists
        let tpm = try StoreTPM.choose(for: found.choosing(choice))
        self.tpm = tpm
        // Interrupted: stop the simulated TPM in order (TPM2_Shutdown), then die of the signal.
        interruptionToken = ProcessGuard.onInterruption { tpm.stop() }
        // Chosen once: the library opens the store on this TPM without choosing again.
        var location = found.choosing(.chosen(tpm))
        // A store with its own simulated TPM keeps its device state beside it; otherwise the
        // library's default applies (one device directory per user and TPM).
        if case .simulatedInStore = tpm.source {
            location.deviceDirectory = path + "/device"
        }
        self.location = location
        if announceSimulation, case .simulatedInStore = tpm.source {
            printError("\(ProcessGuard.programName): note: \(tpm.summary)")
        } else if announceSimulation, !tpm.isSimulated, found.recordedTPMIsSimulated == true {
            printError("\(ProcessGuard.programName): note: \(Self.reportedSoftware(tpm))")
        }
    }

    /// Whether nothing in the store is bound to hardware: the TPM is reached as a simulator, or
    /// the store was made on a TPM that said it is software (however it was reached).
    package var isSimulated: Bool {
        tpm.isSimulated || location.recordedTPMIsSimulated == true
    }

    /// The note for a TPM reached as a device that says it is software (swtpm behind /dev/tpmrm0).
    private static func reportedSoftware(_ tpm: StoreTPM) -> String {
        "SIMULATED: the TPM at \(tpm.configuration.tcti) reports itself as a software TPM (swtpm), although it is reached as a device; secrets are not bound to hardware"
    }

    package func close() {
        // A store is made without rollback protection only when the TPM has no room for its
        // counter (anyone who can use the TPM can fill NV): said once, at creation.
        if !existedBefore, location.storeExists, !tpm.isSimulated, location.recordedTPMIsSimulated == true {
            printError("\(ProcessGuard.programName): note: \(Self.reportedSoftware(tpm))")
        }
        if !existedBefore, location.storeExists, Self.lacksRollbackCounter(location) {
            printError(
                "\(ProcessGuard.programName): warning: the TPM had no room for this store's rollback counter, so older copies of its files and deleted items will not be detected; free NV space (tpm2_getcap handles-nv-index) and see docs/SECURITY.md, \"Rollback and deletion\""
            )
        }
        Keychain.closeStore(location)
        tpm.stop()
        ProcessGuard.remove(interruptionToken)
    }

    /// Whether the store is open without a rollback counter (false when that cannot be told).
    private static func lacksRollbackCounter(_ location: KeychainLocation) -> Bool {
        do {
            return try location.rollbackProtection() == nil
        } catch {
            return false
        }
    }

    /// Opens a session on `path`, runs `body`, and closes the session whatever happens.
    package static func with<R>(_ path: String, _ body: (StoreSession) throws -> R) throws -> R {
        try with(path, at: try KeychainLocation(path: path), body)
    }

    /// As ``with(_:_:)`` with the location of `path` made already.
    private static func with<R>(
        _ path: String, at found: KeychainLocation, _ body: (StoreSession) throws -> R
    ) throws -> R {
        let session = try StoreSession(path: path, at: found, choice: .automaticOrSimulated, announceSimulation: true)
        defer { session.close() }
        return try body(session)
    }

    /// As ``with(_:_:)`` for a store that must exist already: a command that only reads or
    /// changes a store never creates one (or starts a simulator for one).
    ///
    /// - Throws: ``KeychainError`` `.storeNotFound` naming the path, before any TPM is chosen.
    package static func withExisting<R>(_ path: String, _ body: (StoreSession) throws -> R) throws -> R {
        let found = try KeychainLocation(path: path)
        try found.checkStore()
        return try with(path, at: found, body)
    }
}

import Foundation
import TPM
import TPMSimulator
import SystemCalls

/// Which TPM a command talks to, chosen the way every `tpm-keychain` verb does:
/// `TPM_KEYCHAIN_TCTI` if set, else the kernel's resource-managed device if this user may use it,
/// else a private swtpm whose state lives inside the store directory (`<store>/swtpm`), so later
/// runs see the same simulated TPM and the store's master key can be unsealed again. The
/// simulated case is always said out loud: nothing it seals is hardware-bound.
final class TPMSelection {
    enum Source {
        case environment
        case hardware
        case embeddedSimulator(stateDirectory: String)
    }

    let configuration: TPMConfiguration
    let source: Source
    /// How long starting the embedded simulator took; nil when none was started.
    let simulatorStartup: Duration?
    private let simulator: SoftwareTPM?
    /// Held while the embedded swtpm runs: its state directory serves one swtpm at a time, so
    /// other tpm-keychain processes on the same store wait their turn (at most the TPM timeout).
    private var simulatorLock: LockFile?
    /// Stops the simulator in order if the command is interrupted.
    private var interruptionToken: Int?

    /// - Parameters:
    ///   - storeDirectory: the keychain store's directory (absolute). Created (0700) only when the
    ///     embedded simulator is needed, since its state lives there.
    ///   - createStoreDirectory: false for commands that need an existing simulated TPM.
    /// - Throws: ``SoftwareTPMError`` when a simulator is needed but swtpm cannot start;
    ///   ``CommandFailure`` when the store directory or its lock cannot be made, or the lock is
    ///   held past the timeout.
    init(storeDirectory: String, createStoreDirectory: Bool = true) throws {
        if let tcti = TPMConfiguration.environmentTCTI {
            configuration = TPMConfiguration(tcti: tcti)
            source = .environment
            (simulator, simulatorLock, simulatorStartup) = (nil, nil, nil)
        } else if TPMConfiguration.hardwareTPMIsUsable {
            configuration = TPMConfiguration(tcti: TPMConfiguration.defaultTCTI)
            source = .hardware
            (simulator, simulatorLock, simulatorStartup) = (nil, nil, nil)
        } else {
            let stateDirectory = storeDirectory + "/swtpm"
            if !createStoreDirectory && access(stateDirectory, F_OK) != 0 {
                throw CommandFailure(ExitStatus.noInput, "no simulated TPM at \(stateDirectory): the store at \(storeDirectory) was not created with one")
            }
            try StoreDirectory.create(storeDirectory)
            let lock = try Self.lockSimulator(storeDirectory)
            let clock = ContinuousClock()
            let start = clock.now
            // A Unix socket in a private directory: a loopback TCP port would let every local user
            // send this TPM commands (exhaust its lockout counter, unseal with a copied store).
            let started = try SoftwareTPM.start(.init(stateDirectory: stateDirectory, listensOnUnixSocket: true))
            simulatorStartup = clock.now - start
            configuration = TPMConfiguration(tcti: started.tcti)
            source = .embeddedSimulator(stateDirectory: stateDirectory)
            simulator = started
            simulatorLock = lock
            interruptionToken = ProcessGuard.onInterruption { started.stop() }
        }
    }

    /// One line for people: where the TPM is and whether it is real.
    var summary: String {
        switch source {
        case .environment:
            let kind = configuration.isSimulator ? "SIMULATED (not bound to hardware)" : "as configured"
            return "\(configuration.tcti) from \(TPMConfiguration.environmentVariable), \(kind)"
        case .hardware:
            return "hardware TPM at \(configuration.tcti)"
        case .embeddedSimulator(let directory):
            return "SIMULATED: no hardware TPM is usable, so a private swtpm was started (state in \(directory)); secrets are not bound to hardware"
        }
    }

    var isSimulated: Bool {
        if case .hardware = source { return false }
        return configuration.isSimulator
    }

    var isEmbeddedSimulator: Bool {
        if case .embeddedSimulator = source { return true }
        return false
    }

    /// Stops the embedded simulator, then lets the next process start its own. Idempotent.
    func stop() {
        simulator?.stop()
        interruptionToken.map(ProcessGuard.remove)
        interruptionToken = nil
        simulatorLock = nil
    }

    private static func lockSimulator(_ storeDirectory: String) throws(CommandFailure) -> LockFile {
        let path = storeDirectory + "/simulator.lock"
        let timeout = TPMConfiguration.environmentTimeout ?? TPMConfiguration.defaultTimeout
        let lock: LockFile
        do {
            lock = try LockFile(path)
            if try lock.lock(wait: false) { return lock }
            printError("tpm-keychain: waiting for another tpm-keychain using the simulated TPM of \(storeDirectory)")
            if try lock.lock(timeout: timeout) { return lock }
        } catch where error.rawValue == EACCES || error.rawValue == EPERM {
            throw CommandFailure(ExitStatus.permissionDenied, "permission denied: cannot use \(path)")
        } catch {
            throw CommandFailure(ExitStatus.ioError, "cannot lock \(path): \(error)")
        }
        let holder = lock.holderProcessID.map { "process \($0)" } ?? "another process"
        throw CommandFailure(ExitStatus.temporaryFailure,
                             "waited \(timeout) for the simulated TPM of \(storeDirectory); \(holder) still holds \(path). If it is stuck, stop it and try again (\(TPMConfiguration.timeoutVariable) sets the wait in seconds)")
    }

    deinit { stop() }
}

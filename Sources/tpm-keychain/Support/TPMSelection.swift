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
    /// Held while the embedded simulator runs: one swtpm per state directory, across processes.
    /// Held while the embedded swtpm runs: its state directory serves one swtpm at a time, so
    /// other tpm-keychain processes on the same store wait their turn.
    private var simulatorLock: LockFile?

    /// - Parameter storeDirectory: the keychain store's directory (absolute). Created (0700) only
    ///   when the embedded simulator is needed, since its state lives there.
    /// - Throws: ``SoftwareTPMError`` when a simulator is needed but swtpm cannot start;
    ///   ``CommandFailure`` when the store directory or its lock cannot be made.
    init(storeDirectory: String) throws {
        if let tcti = TPMConfiguration.environmentTCTI {
            configuration = TPMConfiguration(tcti: tcti)
            source = .environment
            (simulator, simulatorLock, simulatorStartup) = (nil, nil, nil)
        } else if TPMConfiguration.hardwareTPMIsUsable {
            configuration = TPMConfiguration(tcti: TPMConfiguration.defaultTCTI)
            source = .hardware
            (simulator, simulatorLock, simulatorStartup) = (nil, nil, nil)
        } else {
            try StoreDirectory.create(storeDirectory)
            let lock = try Self.lockSimulator(storeDirectory)
            let stateDirectory = storeDirectory + "/swtpm"
            let clock = ContinuousClock()
            let start = clock.now
            let started = try SoftwareTPM.start(.init(stateDirectory: stateDirectory))
            simulatorStartup = clock.now - start
            configuration = TPMConfiguration(tcti: started.tcti)
            source = .embeddedSimulator(stateDirectory: stateDirectory)
            simulator = started
            simulatorLock = lock
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
        simulatorLock = nil
    }

    private static func lockSimulator(_ storeDirectory: String) throws(CommandFailure) -> LockFile {
        let path = storeDirectory + "/simulator.lock"
        do {
            let lock = try LockFile(path)
            if try !lock.lock(wait: false) {
                printError("tpm-keychain: waiting for another tpm-keychain using the simulated TPM of \(storeDirectory)")
                try lock.lock(wait: true)
            }
            return lock
        } catch {
            throw CommandFailure(ExitStatus.ioError, "cannot lock \(path): \(error)")
        }
    }

    deinit { stop() }
}

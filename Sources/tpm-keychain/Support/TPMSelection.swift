import Foundation
import TPM
import TPMSimulator

/// Which TPM a command talks to, chosen the way every `tpm-keychain` verb does:
/// `TPM_KEYCHAIN_TCTI` if set, else the kernel's resource-managed device if this user may use it,
/// else a private swtpm whose state lives in a directory of ours, so later runs see the same
/// simulated TPM. The simulated case is always said out loud: nothing it seals is hardware-bound.
final class TPMSelection {
    enum Source {
        case environment
        case hardware
        case embeddedSimulator(stateDirectory: String)
    }

    let configuration: TPMConfiguration
    let source: Source
    private let simulator: SoftwareTPM?

    /// - Throws: ``SoftwareTPMError`` when a simulator is needed but swtpm cannot start.
    init(simulatorStateDirectory: String) throws {
        if let tcti = TPMConfiguration.environmentTCTI {
            configuration = TPMConfiguration(tcti: tcti)
            source = .environment
            simulator = nil
        } else if TPMConfiguration.hardwareTPMIsUsable {
            configuration = TPMConfiguration(tcti: TPMConfiguration.defaultTCTI)
            source = .hardware
            simulator = nil
        } else {
            let started = try SoftwareTPM.start(.init(stateDirectory: simulatorStateDirectory))
            configuration = TPMConfiguration(tcti: started.tcti)
            source = .embeddedSimulator(stateDirectory: simulatorStateDirectory)
            simulator = started
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

    func stop() { simulator?.stop() }

    deinit { stop() }
}

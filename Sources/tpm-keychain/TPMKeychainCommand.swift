import ArgumentParser
import Foundation

@main
struct TPMKeychainCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tpm-keychain",
        abstract: "A keychain for Linux whose master key is sealed to the TPM, with the verbs of macOS's security tool.",
        discussion: """
            The TPM is chosen as follows: \(TPMConfigurationHelp.text)

            Exit status: 0 success, 44 item not found, 45 duplicate item (as security), 64 usage, \
            65 unusable data (damaged, or sealed by another TPM), 69 TPM unavailable, 74 I/O error, \
            75 TPM lockout, 77 permission (authorization refused, unsafe file modes).
            """,
        subcommands: [
            AddGenericPassword.self, FindGenericPassword.self, DeleteGenericPassword.self, DumpKeychain.self,
            TPMStatus.self, Demo.self,
        ])
}

enum TPMConfigurationHelp {
    static let text = """
        TPM_KEYCHAIN_TCTI if set (for example swtpm:host=127.0.0.1,port=2321); else the hardware TPM at \
        /dev/tpmrm0 when this user may open it; else a private swtpm started for the command, whose state \
        is kept in the store directory (<store>/swtpm) so later runs see the same simulated TPM. A \
        simulated TPM is always reported as such.
        """
}

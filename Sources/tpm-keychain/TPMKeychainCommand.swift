import ArgumentParser
import Foundation

@main
struct TPMKeychainCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tpm-keychain",
        abstract: "A keychain for Linux whose master key is sealed to the TPM.",
        discussion: """
            The TPM is chosen as follows: \(TPMConfigurationHelp.text)
            """,
        subcommands: [Demo.self, TPMStatus.self])
}

enum TPMConfigurationHelp {
    static let text = """
        TPM_KEYCHAIN_TCTI if set (for example swtpm:host=127.0.0.1,port=2321); else the hardware TPM at \
        /dev/tpmrm0 when this user may open it; else a private swtpm started for the command, whose state \
        is kept so later runs see the same simulated TPM. A simulated TPM is always reported as such.
        """
}

/// Where the CLI keeps its own files: $XDG_DATA_HOME/tpm-keychain, else ~/.local/share/tpm-keychain.
enum DataDirectory {
    static var path: String {
        if let data = ProcessInfo.processInfo.environment["XDG_DATA_HOME"], data.hasPrefix("/") {
            return data + "/tpm-keychain"
        }
        return NSHomeDirectory() + "/.local/share/tpm-keychain"
    }
}

import ArgumentParser
import Foundation
import TPM

/// Which TPM the keychain would use, and what it is.
struct TPMStatus: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tpm-status", abstract: "Show which TPM is used, whether it is simulated, and its storage key.")

    @Option(name: .long, help: "Directory of the simulated TPM's state, used only when no TPM is configured or usable.")
    var directory: String = DataDirectory.path + "/demo"

    func run() throws {
        try reportingErrors {
            try AtomicFile.makeDirectory(directory)
            let selection = try TPMSelection(simulatorStateDirectory: directory + "/swtpm")
            defer { selection.stop() }
            let tpm = try TPMConnection(selection.configuration)
            defer { tpm.close() }
            let description = try tpm.describe()
            let storageKey = try tpm.storageKey()
            print("tpm:          \(selection.summary)")
            print("simulated:    \(selection.isSimulated ? "yes" : "no")")
            print("manufacturer: \(description.manufacturer) (\(description.vendor)), firmware \(description.firmwareVersion)")
            print("storage key:  \(storageKey.algorithm.rawValue), name \(storageKey.name.map { String(format: "%02x", $0) }.joined())")
        }
    }
}

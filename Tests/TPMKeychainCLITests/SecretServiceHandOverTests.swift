import Foundation
import TPMKeychainTesting
import Testing

/// `tpm-keychain secret-service ...` runs `tpm-keychain-secret-service` from the same directory,
/// so that the lookup binary does not carry the daemon.
@Suite("secret-service hands over to its own binary")
struct SecretServiceHandOverTests {
    @Test("the daemon's binary gets the arguments as typed: its own help, its own usage errors")
    func argumentsReachTheDaemonsBinary() throws {
        let help = try CLI.run(["secret-service", "--help"], environment: [:])
        #expect(help.status == 0 && help.stdout.contains("USAGE: tpm-keychain secret-service"), "\(help)")
        #expect(help.stdout.contains("import") && help.stdout.contains("serve"), "\(help)")
        let unknown = try CLI.run(["secret-service", "import", "--frobnicate", "x y"], environment: [:])
        #expect(unknown.status == 64 && unknown.stderr.contains("--frobnicate"), "\(unknown)")
    }

    @Test("without the daemon's binary beside the CLI: 69, naming what to install")
    func aMissingDaemonBinaryIsNamed() throws {
        let directory = NSTemporaryDirectory() + "tpm-keychain-handover-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let alone = directory + "/tpm-keychain"
        try CLI.install(at: alone)
        let result = try CLI.run(["secret-service", "--help"], environment: [:], executable: alone)
        #expect(result.status == 69, "\(result)")
        #expect(
            result.stderr.contains(directory + "/tpm-keychain-secret-service, which is not installed"), "\(result)")
    }
}

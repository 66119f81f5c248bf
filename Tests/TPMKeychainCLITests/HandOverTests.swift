import Foundation
import TPMKeychainTesting
import Testing

/// `tpm-keychain secret-service ...` and `tpm-keychain key ...` run their own binaries from the
/// same directory, so that the lookup binary carries neither the daemon nor SecKey and X.509.
@Suite("verbs with binaries of their own hand over to them")
struct HandOverTests {
    /// Each handed-over verb, its binary, and a subverb its help lists.
    static let verbs: [(verb: String, binary: String, subverb: String)] = [
        ("secret-service", "tpm-keychain-secret-service", "import"),
        ("key", "tpm-keychain-keys", "list"),
    ]

    @Test("the verb's binary gets the arguments as typed: its own help, its own usage errors", arguments: verbs)
    func argumentsReachTheBinary(verb: String, binary: String, subverb: String) throws {
        let help = try CLI.run([verb, "--help"], environment: [:])
        #expect(help.status == 0 && help.stdout.contains("USAGE: tpm-keychain \(verb)"), "\(help)")
        #expect(help.stdout.contains(subverb), "\(help)")
        let unknown = try CLI.run([verb, subverb, "--frobnicate", "x y"], environment: [:])
        #expect(unknown.status == 64 && unknown.stderr.contains("--frobnicate"), "\(unknown)")
    }

    @Test("without the verb's binary beside the CLI: 69, naming what to install", arguments: verbs)
    func aMissingBinaryIsNamed(verb: String, binary: String, subverb: String) throws {
        let directory = NSTemporaryDirectory() + "tpm-keychain-handover-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let alone = directory + "/tpm-keychain"
        try CLI.install(at: alone)
        let result = try CLI.run([verb, "--help"], environment: [:], executable: alone)
        #expect(result.status == 69, "\(result)")
        #expect(result.stderr.contains(directory + "/\(binary), which is not installed"), "\(result)")
    }
}

import Foundation
import TPMKeychainTesting
import Testing

/// create-keychain, list-keychains, delete-keychain.
@Suite("keychain verbs")
struct KeychainVerbsTests {
    @Test("stores are created by name or path, listed, refused twice (45), and deleted with their items")
    func createListDelete() throws {
        let fixture = try CLIFixture()
        try CLI.run(["create-keychain", "work"], environment: fixture.environment).expectSuccess()
        try CLI.run(["create-keychain", fixture.directory + "/elsewhere"], environment: fixture.environment)
            .expectSuccess()
        let again = try CLI.run(["create-keychain", "work"], environment: fixture.environment)
        #expect(again.status == 45, "\(again)")
        let dataDirectory = fixture.directory + "/xdg-data/tpm-keychain"
        let listed = try CLI.run(["list-keychains"], environment: fixture.environment)
        #expect(listed.stdout == "    \"\(dataDirectory)/work\"\n", "\(listed)")
        try CLI.run(
            ["add-generic-password", "--keychain", dataDirectory + "/work", "-s", "svc", "-a", "a", "-w", "v"],
            environment: fixture.environment
        ).expectSuccess()
        try CLI.run(["delete-keychain", "work"], environment: fixture.environment).expectSuccess()
        #expect(!FileManager.default.fileExists(atPath: dataDirectory + "/work"))
        #expect(try CLI.run(["list-keychains"], environment: fixture.environment).stdout.isEmpty)
        let missing = try CLI.run(["delete-keychain", "work"], environment: fixture.environment)
        #expect(missing.status == 66, "\(missing)")
        #expect(FileManager.default.fileExists(atPath: fixture.directory + "/elsewhere/store.meta"))
        let invalid = try CLI.run(["create-keychain", ".."], environment: fixture.environment)
        #expect(invalid.status == 64, "\(invalid)")
    }
}

extension KeychainVerbsTests {
    @Test(
        "create-keychain --recovery-key prints the key once; on a replacement TPM the store is refused (65) naming recover, and recover with the key brings it back"
    )
    func recoveryKey() throws {
        let fixture = try CLIFixture()
        let created = try CLI.run(
            ["create-keychain", "--recovery-key", fixture.store], environment: fixture.environment)
        try created.expectSuccess()
        let key = created.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(key.split(separator: "-").count == 8, "\(created)")
        #expect(created.stderr.contains("shown only now"), "\(created)")
        try fixture.succeed("add-generic-password", "-s", "svc", "-a", "kept", "-w", "still here")

        let replacement = try SoftwareTPM.start()
        defer { replacement.stop() }
        let refused = try fixture.run("find-generic-password", "-s", "svc", "-a", "kept", "-w", tcti: replacement.tcti)
        #expect(refused.status == 65, "\(refused)")
        #expect(refused.stderr.contains("tpm-keychain recover"), "\(refused)")
        let wrong = try fixture.run(
            "recover", "--recovery-key-fd", "0", stdin: Data((String(repeating: "cbdefghi", count: 8) + "\n").utf8),
            tcti: replacement.tcti)
        #expect(wrong.status == 77, "\(wrong)")
        let recovered = try fixture.run(
            "recover", "--recovery-key-fd", "0", stdin: Data((key + "\n").utf8), tcti: replacement.tcti)
        #expect(recovered.status == 0, "\(recovered)")
        #expect(
            recovered.stdout == "recovered \(fixture.store): 1 items kept, 0 items bound to the old TPM removed\n",
            "\(recovered)")
        let found = try fixture.run("find-generic-password", "-s", "svc", "-a", "kept", "-w", tcti: replacement.tcti)
        #expect(found.stdout == "still here\n", "\(found)")
    }
}

extension CLIResult {
    func expectSuccess(sourceLocation: SourceLocation = #_sourceLocation) throws {
        #expect(status == 0, "\(self)", sourceLocation: sourceLocation)
    }
}

import Foundation
import Testing

/// create-keychain, list-keychains, delete-keychain.
@Suite("keychain verbs")
struct KeychainVerbsTests {
    @Test("stores are created by name or path, listed, refused twice (45), and deleted with their items")
    func createListDelete() throws {
        let fixture = try CLIFixture()
        try CLI.run(["create-keychain", "work"], environment: fixture.environment).expectSuccess()
        try CLI.run(["create-keychain", fixture.directory + "/elsewhere"], environment: fixture.environment).expectSuccess()
        let again = try CLI.run(["create-keychain", "work"], environment: fixture.environment)
        #expect(again.status == 45, "\(again)")
        let dataDirectory = fixture.directory + "/xdg-data/tpm-keychain"
        let listed = try CLI.run(["list-keychains"], environment: fixture.environment)
        #expect(listed.stdout == "    \"\(dataDirectory)/work\"\n", "\(listed)")
        try CLI.run(["add-generic-password", "--keychain", dataDirectory + "/work", "-s", "svc", "-a", "a", "-w", "v"],
                    environment: fixture.environment).expectSuccess()
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

extension CLIResult {
    func expectSuccess(sourceLocation: SourceLocation = #_sourceLocation) throws {
        #expect(status == 0, "\(self)", sourceLocation: sourceLocation)
    }
}

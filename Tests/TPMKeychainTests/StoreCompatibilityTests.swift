import Foundation
import TPMKeychain
import TPMKeychainTesting
import Testing

/// Fixtures/store-v1/expected.json.
struct ExpectedStore: Decodable {
    struct Item: Decodable {
        let service, account, password: String
        let label, comment: String?
    }
    let items: [Item]
}

@Suite struct StoreCompatibilityTests {
    @Test("A store written by format version 1 (with the swtpm state it was sealed to) still opens and reads")
    func readsTheVersionOneStore() throws {
        let expected = try ProjectFixtures.load("store-v1/expected.json", as: ExpectedStore.self)
        let source = ProjectFixtures.directory.appendingPathComponent("store-v1/store").path
        let copy = NSTemporaryDirectory() + "tpm-keychain-store-v1-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: copy) }
        try FileManager.default.copyItem(atPath: source, toPath: copy)
        // git keeps neither 0700 nor 0600; a store restored that way needs its modes back.
        for case let relative as String in FileManager.default.enumerator(atPath: copy)! {
            var isDirectory: ObjCBool = false
            _ = FileManager.default.fileExists(atPath: copy + "/" + relative, isDirectory: &isDirectory)
            try FileManager.default.setAttributes(
                [.posixPermissions: isDirectory.boolValue ? 0o700 : 0o600],
                ofItemAtPath: copy + "/" + relative)
        }
        try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: copy)

        let simulator = try SoftwareTPM.start(.init(stateDirectory: copy + "/swtpm"))
        defer { simulator.stop() }
        let location = try KeychainLocation(path: copy, tcti: simulator.tcti)
        defer { Keychain.closeStore(location) }

        let all = try Keychain.allItems(in: location)
        #expect(all.count == expected.items.count)
        for item in expected.items {
            let keychain = try Keychain(service: item.service, location: location)
            #expect(try keychain.string(forKey: item.account) == item.password, "\(item.service)/\(item.account)")
            let attributes = try #require(try keychain.attributes(forKey: item.account))
            #expect(attributes.label == item.label)
            #expect(attributes.comment == item.comment)
        }
    }
}

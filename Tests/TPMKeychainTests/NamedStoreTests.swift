import Foundation
import TPMKeychain
import Testing

@Suite struct NamedStoreTests {
    @Test("stores are created, listed and removed by name; removing one leaves the others and erases its files")
    func createListRemove() throws {
        let store = try TestStore()
        let directory = store.directory + "/stores"
        let first = try KeychainLocation(path: directory + "/first", tcti: store.simulator.tcti)
        let second = try KeychainLocation(path: directory + "/second", tcti: store.simulator.tcti)
        defer {
            Keychain.closeStore(first)
            Keychain.closeStore(second)
        }
        try first.createStore()
        expectKeychainError(.duplicateItem) { try first.createStore() }
        try Keychain(service: "svc", location: second).set("kept", forKey: "k")
        try FileManager.default.createDirectory(atPath: directory + "/not-a-store", withIntermediateDirectories: true)
        #expect(KeychainLocation.storeNames(in: directory) == ["first", "second"])
        try first.removeStore()
        #expect(!FileManager.default.fileExists(atPath: first.path))
        #expect(KeychainLocation.storeNames(in: directory) == ["second"])
        #expect(try Keychain(service: "svc", location: second).string(forKey: "k") == "kept")
        expectKeychainError(.storeNotFound) { try first.removeStore() }
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory).allSatisfy { !$0.contains("removed") })
    }
}

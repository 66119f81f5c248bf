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

    @Test(
        "A location with another TPM chosen keeps its path as normalised when it was made (no second walk over symbolic links) and its other settings"
    )
    func choosingKeepsThePath() throws {
        try Self.withLinkedDirectories { base in
            var location = try KeychainLocation(path: base + "/link/./store/../store")
            location.deviceDirectory = "/elsewhere"
            #expect(location.path.hasSuffix("/one/store"), "\(location.path)")
            #expect(location.tcti == nil)

            // The link now leads elsewhere: a location made again follows it, a chosen one keeps its path.
            try FileManager.default.removeItem(atPath: base + "/link")
            try FileManager.default.createSymbolicLink(atPath: base + "/link", withDestinationPath: base + "/two")
            let chosen = location.choosing(.tcti("swtpm:host=127.0.0.1,port=1"))
            #expect(chosen.path == location.path)
            #expect(chosen.tcti == "swtpm:host=127.0.0.1,port=1")
            #expect(chosen.deviceDirectory == "/elsewhere")
            #expect(chosen != location)
            #expect(try KeychainLocation(path: base + "/link/store").path.hasSuffix("/two/store"))
        }
    }

    @Test(
        "Normalising resolves ., .. and links; a path this process normalised lately comes back as is, without a second walk"
    )
    func normalisedPathsAreFixedPoints() throws {
        try Self.withLinkedDirectories { base in
            let normalised = KeychainLocation.normalized(base + "//link/./store/../store")
            #expect(normalised == KeychainLocation.normalized(base) + "/one/store", "\(normalised)")
            #expect(KeychainLocation.normalized(normalised) == normalised)
            #expect(try KeychainLocation(path: normalised).path == normalised)

            // "one" becomes a link: the recent result is recognised and kept (no walk); any other
            // spelling is walked and follows the new link.
            try FileManager.default.removeItem(atPath: base + "/one")
            try FileManager.default.createSymbolicLink(atPath: base + "/one", withDestinationPath: base + "/two")
            #expect(KeychainLocation.normalized(normalised) == normalised)
            #expect(KeychainLocation.normalized(normalised + "/.").hasSuffix("/two/store"))
        }
    }

    /// A fresh directory holding `one` and `two`, and `link` leading to `one`; removed afterwards.
    private static func withLinkedDirectories(_ body: (String) throws -> Void) throws {
        let base = NSTemporaryDirectory() + "tpm-location-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: base) }
        for name in ["one", "two"] {
            try FileManager.default.createDirectory(atPath: base + "/" + name, withIntermediateDirectories: true)
        }
        try FileManager.default.createSymbolicLink(atPath: base + "/link", withDestinationPath: base + "/one")
        try body(base)
    }
}

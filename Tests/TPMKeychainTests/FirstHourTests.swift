import Foundation
import TPMKeychain
import TPMKeychainTesting
import Testing

/// What a new user ran into in their first hour with the library.
@Suite("first hour with the API")
struct FirstHourTests {
    @Test("storing a nil optional removes the item instead of storing the text null; add(nil) is refused")
    func nilOptionalsRemove() throws {
        let store = try TestStore()
        let keychain = try store.keychain()
        try keychain.set("token", forKey: "tok")
        let none: String? = nil
        try keychain.set(none, forKey: "tok")
        #expect(try keychain.contains("tok") == false)
        #expect(try keychain.string(forKey: "tok") == nil)
        // Nothing to remove is fine too, and a nested nil is still nil.
        let nested: String?? = .some(nil)
        try keychain.set(nested, forKey: "tok")
        #expect(try keychain.contains("tok") == false)
        expectKeychainError(.invalidParameter) { try keychain.add(none, forKey: "tok") }
        #expect(try keychain.contains("tok") == false)
        // A present optional is stored as its value.
        let some: String? = "value"
        try keychain.set(some, forKey: "tok")
        #expect(try keychain.string(forKey: "tok") == "value")
    }

    @Test("bool, int and double conveniences and the read-only string subscript")
    func typedConveniences() throws {
        let store = try TestStore()
        let keychain = try store.keychain()
        try keychain.set(true, forKey: "flag")
        try keychain.set(42, forKey: "count")
        try keychain.set(2.5, forKey: "ratio")
        try keychain.set("text", forKey: "name")
        #expect(try keychain.bool(forKey: "flag") == true)
        #expect(try keychain.int(forKey: "count") == 42)
        #expect(try keychain.double(forKey: "ratio") == 2.5)
        #expect(try keychain["name"] == "text")
        #expect(try keychain["absent"] == nil)
        expectKeychainError(.decodingFailed) { _ = try keychain.int(forKey: "name") }
    }

    @Test("a literal service needs no try, and its items are those of the throwing initialiser")
    func literalServices() throws {
        let store = try TestStore()
        let literal = Keychain(literalService: "com.example.tests", location: store.location)
        try literal.set("shared", forKey: "key")
        #expect(try store.keychain("com.example.tests").string(forKey: "key") == "shared")
        #expect(literal == (try store.keychain("com.example.tests")))
    }

    @Test("locations are validated when made: relative paths and path-like store names are refused")
    func locationsAreValidated() throws {
        expectKeychainError(.invalidParameter) { _ = try KeychainLocation(path: "relative/store") }
        expectKeychainError(.invalidParameter) { _ = try KeychainLocation(path: "") }
        for name in ["", ".", "..", "a/b", "nul\u{0}"] {
            expectKeychainError(.invalidParameter) { _ = try KeychainLocation.named(name) }
        }
        let location = try KeychainLocation(path: "/tmp/a/../b//store/")
        #expect(location.path == "/tmp/b/store")
        #expect(try KeychainLocation.named("work").path == KeychainLocation.dataDirectory + "/work")
    }

    @Test("a first open that cannot reach the TPM creates nothing")
    func failedFirstOpenLeavesNothing() throws {
        let directory = NSTemporaryDirectory() + "tpm-keychain-unreachable-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let location = try KeychainLocation(path: directory + "/nested/store", tcti: "swtpm:host=127.0.0.1,port=1")
        expectKeychainError(.tpmUnavailable) { try Keychain(service: "svc", location: location).set("v", forKey: "k") }
        #expect(!FileManager.default.fileExists(atPath: directory))
    }

    @Test("public types print readably, without internal module names or secrets")
    func descriptions() throws {
        let store = try TestStore()
        let keychain = try store.keychain("com.example.print", accessGroup: "group.example")
        try keychain.set("s3cret-value", forKey: "alice", label: "Mail", genericData: Data([1, 2, 3]))
        let attributes = try #require(try keychain.attributes(forKey: "alice"))
        let texts = [
            String(describing: attributes), String(describing: keychain), String(describing: store.location),
            String(describing: KeychainError(.itemNotFound, "No item")),
        ]
        for text in texts {
            #expect(!text.contains("KeychainStore."), "\(text)")
            #expect(!text.contains("accessGroupName"), "\(text)")
            #expect(!text.contains("s3cret-value"), "\(text)")
        }
        #expect(texts[0].contains("account: \"alice\"") && texts[0].contains("genericData: 3 bytes"), "\(texts[0])")
        #expect(
            texts[1]
                == "Keychain(service: \"com.example.print\", accessGroup: \"group.example\", \(store.location.path))")
    }

    @Test("attributes can be removed, not only set, and the value is kept")
    func attributesCanBeRemoved() throws {
        let store = try TestStore()
        let keychain = try store.keychain()
        try keychain.set("secret", forKey: "k", label: "Label", comment: "Comment", genericData: Data([1]))
        try keychain.updateAttributes(forKey: "k", removing: [.comment, .genericData])
        let attributes = try #require(try keychain.attributes(forKey: "k"))
        #expect(attributes.label == "Label")
        #expect(attributes.comment == nil)
        #expect(attributes.genericData == nil)
        #expect(try keychain.string(forKey: "k") == "secret")
        expectKeychainError(.itemNotFound) { try keychain.updateAttributes(forKey: "absent", removing: [.label]) }
    }
}

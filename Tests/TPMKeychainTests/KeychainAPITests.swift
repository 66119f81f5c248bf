import Foundation
import TPMKeychain
import Testing

/// A session object like the ones apps keep: keys, public-key coordinates, a JWT and a wallet.
struct Session: Codable, Equatable {
    var accessToken: String
    var refreshToken: String
    var jwt: String
    var expiresAt: Date
    var publicKeyX: Data
    var publicKeyY: Data
    var walletAddress: String
}

@Suite struct KeychainAPITests {
    @Test func everyValueTypeRoundTrips() throws {
        let store = try TestStore()
        let keychain = try store.keychain()
        let session = Session(
            accessToken: "at-123", refreshToken: "rt-456", jwt: "eyJhbGciOiJFUzI1NiJ9.e30.sig",
            expiresAt: Date(timeIntervalSince1970: 1_900_000_000), publicKeyX: Data(repeating: 7, count: 32),
            publicKeyY: Data(repeating: 9, count: 32), walletAddress: "0x52908400098527886E0F7030069857D2E4169EE7")
        try keychain.set(Data([0, 1, 2, 255]), forKey: "data")
        try keychain.set("päss wörd ✓", forKey: "string")
        try keychain.set(true, forKey: "bool")
        try keychain.set(-42, forKey: "int")
        try keychain.set(3.141592653589793, forKey: "double")
        try keychain.set(session, forKey: "session")
        #expect(try keychain.data(forKey: "data") == Data([0, 1, 2, 255]))
        #expect(try keychain.string(forKey: "string") == "päss wörd ✓")
        #expect(try keychain.get("bool", as: Bool.self) == true)
        #expect(try keychain.get("int", as: Int.self) == -42)
        #expect(try keychain.get("double", as: Double.self) == 3.141592653589793)
        #expect(try keychain.get("session", as: Session.self) == session)
        // In creation order, as Apple's match-limit-all lists them.
        #expect(try keychain.allKeys() == ["data", "string", "bool", "int", "double", "session"])
    }

    @Test func attributesAreStoredAndReadableWithoutTheSecret() throws {
        let store = try TestStore()
        let keychain = try store.keychain()
        let before = Date()
        try keychain.set(
            "v1", forKey: "account", label: "Label", comment: "A comment", genericData: Data([1, 2, 3]),
            accessibility: .afterFirstUnlockThisDeviceOnly)
        let first = try #require(try keychain.attributes(forKey: "account"))
        #expect(first.label == "Label")
        #expect(first.comment == "A comment")
        #expect(first.genericData == Data([1, 2, 3]))
        #expect(first.accessibility == .afterFirstUnlockThisDeviceOnly)
        #expect(first.service == "com.example.tests" && first.account == "account" && first.accessGroup == nil)
        #expect(first.creationDate.timeIntervalSince(before) > -1 && first.creationDate == first.modificationDate)
        Thread.sleep(forTimeInterval: 0.01)
        try keychain.set("v2", forKey: "account", comment: "Changed")
        let second = try #require(try keychain.attributes(forKey: "account"))
        #expect(second.label == "Label", "attributes not given are kept")
        #expect(second.comment == "Changed")
        #expect(second.creationDate == first.creationDate)
        #expect(second.modificationDate > first.modificationDate)
        try keychain.updateAttributes(forKey: "account", label: "Relabelled")
        #expect(try keychain.attributes(forKey: "account")?.label == "Relabelled")
        #expect(try keychain.string(forKey: "account") == "v2", "updating attributes keeps the value")
    }

    @Test func duplicateAndNotFound() throws {
        let store = try TestStore()
        let keychain = try store.keychain()
        try keychain.add("first", forKey: "key")
        expectKeychainError(.duplicateItem) { try keychain.add("second", forKey: "key") }
        #expect(try keychain.string(forKey: "key") == "first")
        #expect(try keychain.get("missing", as: String.self) == nil)
        #expect(try !keychain.contains("missing"))
        #expect(try keychain.attributes(forKey: "missing") == nil)
        #expect(try !keychain.remove("missing"))
        expectKeychainError(.itemNotFound) { try keychain.updateAttributes(forKey: "missing", label: "x") }
    }

    @Test func servicesAndAccessGroupsAreSeparate() throws {
        let store = try TestStore()
        let a = try store.keychain("service.a")
        let b = try store.keychain("service.b")
        let grouped = try store.keychain("service.a", accessGroup: "team.shared")
        try a.set("a", forKey: "key")
        try b.set("b", forKey: "key")
        try grouped.set("g", forKey: "key")
        #expect(try a.string(forKey: "key") == "a")
        #expect(try b.string(forKey: "key") == "b")
        #expect(try grouped.string(forKey: "key") == "g")
        #expect(try a.removeAll() == 1)
        #expect(try a.allKeys().isEmpty)
        #expect(try b.string(forKey: "key") == "b")
        #expect(try grouped.string(forKey: "key") == "g")
        let everything = try Keychain.allItems(in: store.location).map {
            "\($0.accessGroup ?? "")/\($0.service)/\($0.account)"
        }
        #expect(everything == ["/service.b/key", "team.shared/service.a/key"])
    }

    @Test func badInputGetsTypedErrors() throws {
        let store = try TestStore()
        expectKeychainError(.invalidParameter) { _ = try Keychain(service: "", location: store.location) }
        expectKeychainError(.invalidParameter) {
            _ = try Keychain(service: String(repeating: "s", count: 1025), location: store.location)
        }
        expectKeychainError(.invalidParameter) {
            _ = try Keychain(service: "ok", accessGroup: "", location: store.location)
        }
        let keychain = try store.keychain()
        expectKeychainError(.invalidParameter) { try keychain.set("v", forKey: "") }
        expectKeychainError(.invalidParameter) { try keychain.set("v", forKey: "a\u{0}b") }
        expectKeychainError(.invalidParameter) { try keychain.set("v", forKey: String(repeating: "k", count: 1025)) }
        expectKeychainError(.invalidParameter) { try keychain.set(Data(count: (16 << 20) + 1), forKey: "huge") }
        expectKeychainError(.invalidParameter) {
            try keychain.set("v", forKey: "k", label: String(repeating: "l", count: 4097))
        }
        #expect(try !keychain.contains("huge"), "a refused write stores nothing")
        try keychain.set(Data([0xFF, 0xFE, 0x00]), forKey: "binary")
        expectKeychainError(.decodingFailed) { _ = try keychain.string(forKey: "binary") }
        expectKeychainError(.decodingFailed) { _ = try keychain.get("binary", as: Int.self) }
        expectKeychainError(.decodingFailed) { _ = try keychain.get("binary", as: Session.self) }
        #expect(try keychain.data(forKey: "binary") == Data([0xFF, 0xFE, 0x00]), "a failed decode loses nothing")
    }

    @Test("Values of 1 MiB and more work (limit 16 MiB)")
    func largeValues() throws {
        let store = try TestStore()
        let keychain = try store.keychain()
        let megabyte = Data((0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        try keychain.set(megabyte, forKey: "one-mebibyte")
        #expect(try keychain.data(forKey: "one-mebibyte") == megabyte)
        let maximum = Data(repeating: 0xA5, count: 16 << 20)
        try keychain.set(maximum, forKey: "maximum")
        #expect(try keychain.data(forKey: "maximum")?.count == 16 << 20)
    }

    @Test(
        "Recipes: tokens cleared on logout, a Codable session saved and restored, reads from any thread",
        .tags(.concurrency))
    func recipes() async throws {
        let store = try TestStore()
        let auth = try store.keychain("com.example.auth")
        try auth.set("access-1", forKey: "accessToken")
        try auth.set("refresh-1", forKey: "refreshToken")
        #expect(try auth.removeAll() == 2)
        #expect(try auth.string(forKey: "accessToken") == nil && auth.string(forKey: "refreshToken") == nil)

        let session = Session(
            accessToken: "a", refreshToken: "r", jwt: "j", expiresAt: Date(timeIntervalSince1970: 2e9),
            publicKeyX: Data([1]), publicKeyY: Data([2]), walletAddress: "0xabc")
        #expect(try !auth.contains("session"))
        try auth.set(session, forKey: "session")
        #expect(try auth.contains("session"))
        #expect(try auth.get("session", as: Session.self) == session)

        try auth.set("shared-token", forKey: "token")
        let tokens = try await withThrowingTaskGroup(of: String?.self) { group in
            for _ in 0..<16 { group.addTask { try auth.string(forKey: "token") } }
            return try await group.reduce(into: [String?]()) { $0.append($1) }
        }
        #expect(tokens.count == 16 && tokens.allSatisfy { $0 == "shared-token" })
    }

    @Test func closingTheStoreErasesKeysAndReopeningUnsealsAgain() throws {
        let store = try TestStore()
        let keychain = try store.keychain()
        try keychain.set("kept", forKey: "key")
        Keychain.closeStore(store.location)
        #expect(try keychain.string(forKey: "key") == "kept")
    }
}

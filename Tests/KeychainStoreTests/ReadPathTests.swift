import Foundation
import KeychainVocabulary
import Testing

@testable import KeychainStore

/// The one read path (`ItemStore+Reading.swift`, `readItem`): every read of one item, whichever
/// face asked and whatever it wanted, opens, authenticates and checks the rollback guard the same
/// way. Each test makes one read kind meet a file that is not what the store wrote.
@Suite struct ReadPathTests {
    static let alice = try! ItemIdentity(accessGroup: "", service: "svc", account: "alice")
    static let bob = try! ItemIdentity(accessGroup: "", service: "svc", account: "bob")

    static func value(_ text: String) -> ItemValue { ItemValue(kind: .string, bytes: Array(text.utf8)) }

    /// The one item file of `identity`, found as the only file a write of it added.
    static func write(
        _ identity: ItemIdentity, _ text: String, mode: ItemWriteMode = .add, in store: ItemStore, _ engine: EngineStore
    ) throws -> String {
        let before = Set(try engine.itemFiles())
        var changes = AttributeChanges()
        changes.label = "label of \(text)"
        try store.write(identity, mode: mode, value: value(text), changes: changes)
        return try #require(Set(try engine.itemFiles()).subtracting(before).first ?? engine.itemFiles().first)
    }

    @Test("each read kind returns what it was asked for, and only that")
    func eachKindReadsItsParts() throws {
        let engine = try EngineStore()
        let store = try engine.open()
        defer { store.close() }
        _ = try Self.write(Self.alice, "one", in: store, engine)
        let item = try #require(try store.item(Self.alice))
        #expect(item.value.bytes == Array("one".utf8) && item.attributes.label == "label of one")
        #expect(try store.value(Self.alice)?.bytes == Array("one".utf8))
        #expect(try store.attributes(Self.alice)?.label == "label of one")
        let byPrimary = try #require(try store.item(.genericPassword, primary: AttributeList(Self.alice)))
        #expect(byPrimary.value == nil, "attributes only unless the secret is asked for")
        #expect(byPrimary.attributes.string(AttributeTag.label) == "label of one")
        let withSecret = try #require(
            try store.item(.genericPassword, primary: AttributeList(Self.alice), withSecret: true))
        #expect(withSecret.value == Array("one".utf8))
        #expect(withSecret.reference == byPrimary.reference)
        let result = try #require(try store.query(ItemQuery(itemClass: .genericPassword)).first)
        #expect(try store.secret(of: result, recordKey: nil) == Array("one".utf8))
        #expect(try store.value(Self.bob) == nil && store.attributes(Self.bob) == nil)
    }

    @Test("another item's file renamed into its place is refused by every read kind")
    func swappedFileIsRefusedByEveryKind() throws {
        let engine = try EngineStore()
        let store = try engine.open()
        defer { store.close() }
        let aliceFile = try Self.write(Self.alice, "alice's", in: store, engine)
        let bobFile = try Self.write(Self.bob, "bob's", in: store, engine)
        let result = try #require(
            try store.query(ItemQuery(itemClass: .genericPassword)).first {
                $0.attributes.string(AttributeTag.account) == "alice"
            })
        try FileManager.default.removeItem(atPath: aliceFile)
        try FileManager.default.copyItem(atPath: bobFile, toPath: aliceFile)
        store.forgetCaches()
        expectKeychainError(.tampered) { _ = try store.item(Self.alice) }
        expectKeychainError(.tampered) { _ = try store.value(Self.alice) }
        expectKeychainError(.tampered) { _ = try store.attributes(Self.alice) }
        expectKeychainError(.tampered) { _ = try store.item(.genericPassword, primary: AttributeList(Self.alice)) }
        expectKeychainError(.tampered) { _ = try store.secret(of: result, recordKey: nil) }
    }

    @Test("an older copy put back is refused by every read kind, a query result's secret included")
    func olderCopyIsRefusedByEveryKind() throws {
        let engine = try EngineStore()
        let store = try engine.open()
        defer { store.close() }
        #expect(store.isRollbackProtected, "the simulator has NV counters: the store must be rollback-protected")
        let file = try Self.write(Self.alice, "first", in: store, engine)
        let older = try bytes(of: file)
        _ = try Self.write(Self.alice, "second", mode: .upsert, in: store, engine)
        // Found while current: the result a client holds from a listing before the file changed.
        let result = try #require(try store.query(ItemQuery(itemClass: .genericPassword)).first)
        try Data(older).write(to: URL(fileURLWithPath: file))
        store.forgetCaches()
        expectKeychainError(.rolledBack) { _ = try store.item(Self.alice) }
        expectKeychainError(.rolledBack) { _ = try store.value(Self.alice) }
        expectKeychainError(.rolledBack) { _ = try store.attributes(Self.alice) }
        expectKeychainError(.rolledBack) {
            _ = try store.item(.genericPassword, primary: AttributeList(Self.alice), withSecret: true)
        }
        expectKeychainError(.rolledBack) { _ = try store.secret(of: result, recordKey: nil) }
    }

    @Test("a read of the secret alone still authenticates the item: a flipped secret byte is tampering")
    func secretAloneIsAuthenticated() throws {
        let engine = try EngineStore()
        let store = try engine.open()
        defer { store.close() }
        let file = try Self.write(Self.alice, "secret", in: store, engine)
        var damaged = try bytes(of: file)
        damaged[damaged.count - 20] ^= 0x01
        try Data(damaged).write(to: URL(fileURLWithPath: file))
        store.forgetCaches()
        expectKeychainError(.tampered) { _ = try store.value(Self.alice) }
        // The attributes section is untouched: a read that needs only it still succeeds.
        #expect(try store.attributes(Self.alice)?.label == "label of secret")
    }
}

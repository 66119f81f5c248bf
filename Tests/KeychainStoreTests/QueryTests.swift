import Foundation
import KeychainVocabulary
import SystemCalls
import Testing

@testable import KeychainStore

@Suite("queries over the store")
struct QueryTests {
    static func internet(_ server: String, account: String, port: UInt32 = 443, sync: Bool? = nil) -> AttributeList {
        var attributes = AttributeList()
        attributes.setString(server, for: AttributeTag.server)
        attributes.setString(account, for: AttributeTag.account)
        attributes.setUInt32(FourCharacterCode("htps").rawValue, for: AttributeTag.protocol)
        attributes.setUInt32(port, for: AttributeTag.port)
        attributes.setBool(sync, for: AttributeTag.synchronizable)
        return attributes
    }

    static func value(_ text: String) -> ItemValue { ItemValue(kind: .string, bytes: Array(text.utf8)) }

    @Test("class, equality on any attribute, sync yes/no/any, limit one, data on request, creation order")
    func matching() throws {
        let store = try EngineStore()
        let opened = try store.open()
        defer { opened.close() }
        try opened.write(
            .internetPassword, primary: Self.internet("git.example.com", account: "bob"), mode: .add,
            value: Self.value("b"), changes: AttributeChanges(label: "work"))
        try opened.write(
            .internetPassword, primary: Self.internet("git.example.com", account: "alice"), mode: .add,
            value: Self.value("a"), changes: AttributeChanges())
        try opened.write(
            .internetPassword, primary: Self.internet("git.example.com", account: "carol", sync: true), mode: .add,
            value: Self.value("c"), changes: AttributeChanges(label: "work"))
        try opened.write(
            .internetPassword, primary: Self.internet("mail.example.com", account: "bob", port: 993), mode: .add,
            value: Self.value("m"), changes: AttributeChanges())
        try opened.write(
            try ItemIdentity(accessGroup: "", service: "git.example.com", account: "bob"), mode: .add,
            value: Self.value("generic"), changes: AttributeChanges())

        func accounts(_ query: ItemQuery) throws -> [String] {
            try opened.query(query).map { $0.attributes.string(AttributeTag.account) ?? "?" }
        }
        var git = AttributeList()
        git.setString("git.example.com", for: AttributeTag.server)
        // Creation order, not name order; the synchronizable item only when asked.
        #expect(try accounts(ItemQuery(itemClass: .internetPassword, matching: git)) == ["bob", "alice"])
        #expect(try accounts(ItemQuery(itemClass: .internetPassword, matching: git, synchronizable: .yes)) == ["carol"])
        #expect(
            try accounts(ItemQuery(itemClass: .internetPassword, matching: git, synchronizable: .any)) == [
                "bob", "alice", "carol",
            ])
        #expect(try accounts(ItemQuery(itemClass: .internetPassword)) == ["bob", "alice", "bob"])
        var work = AttributeList()
        work.setString("work", for: AttributeTag.label)
        #expect(
            try accounts(ItemQuery(itemClass: .internetPassword, matching: work, synchronizable: .any)) == [
                "bob", "carol",
            ])
        var imaps = AttributeList()
        imaps.setUInt32(993, for: AttributeTag.port)
        let mail = try opened.query(ItemQuery(itemClass: .internetPassword, matching: imaps, returnsData: true))
        #expect(mail.count == 1 && mail.first?.value == Array("m".utf8))
        #expect(try opened.query(ItemQuery(itemClass: .internetPassword, matching: git)).allSatisfy { $0.value == nil })
        #expect(try accounts(ItemQuery(itemClass: .internetPassword, limit: .one)) == ["bob"])
        // The generic password with the same names is another class.
        #expect(try accounts(ItemQuery(itemClass: .genericPassword)) == ["bob"])
    }

    @Test("listings from eight threads at once each see every item: a listing reads its directories on its own")
    func concurrentListings() throws {
        let store = try EngineStore()
        let opened = try store.open()
        defer { opened.close() }
        // Three servers: a listing reads the items directory, then three group directories.
        for index in 0..<12 {
            try opened.write(
                .internetPassword, primary: Self.internet("host\(index % 3).example.com", account: "user\(index)"),
                mode: .add, value: Self.value("secret \(index)"), changes: AttributeChanges())
        }
        // Every thread lists the same open store (its cached directories shared) many times over.
        let counts = Locked<[Int: Int]>([:])
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            for _ in 0..<200 {
                let count = (try? opened.query(ItemQuery(itemClass: .internetPassword)).count) ?? -1
                counts.withLock { $0[count, default: 0] += 1 }
            }
        }
        #expect(counts.withLock { $0 } == [12: 1600], "listings by how many items each found")
    }

    @Test("a persistent reference is stable across updates and gone with the item")
    func persistentReferences() throws {
        let store = try EngineStore()
        let opened = try store.open()
        defer { opened.close() }
        let primary = Self.internet("git.example.com", account: "bob")
        try opened.write(
            .internetPassword, primary: primary, mode: .add, value: Self.value("first"), changes: AttributeChanges())
        let reference = try #require(try opened.query(ItemQuery(itemClass: .internetPassword)).first?.reference)
        try opened.write(
            .internetPassword, primary: primary, mode: .upsert, value: Self.value("second"), changes: AttributeChanges()
        )
        #expect(try opened.query(ItemQuery(itemClass: .internetPassword)).first?.reference == reference)
        #expect(try opened.item(reference: reference)?.value == Array("second".utf8))
        #expect(try opened.delete(.internetPassword, primary: primary))
        #expect(try opened.item(reference: reference) == nil)
        expectKeychainError(.invalidParameter) { _ = try opened.item(reference: [1, 2, 3]) }
    }

    @Test(
        "certificates and keys are named by Apple's primary keys; an absent primary-key attribute counts as empty, as Apple's does"
    )
    func reservedAndIncomplete() throws {
        let store = try EngineStore()
        let opened = try store.open()
        defer { opened.close() }
        // Two certificates with the same issuer and serial number are one item, whatever their label.
        var certificate = AttributeList()
        certificate[FourCharacterCode("issr")] = Array("issuer".utf8)
        certificate[FourCharacterCode("slnr")] = [0x12, 0x34]
        try opened.write(
            .certificate, primary: certificate, mode: .add, value: Self.value("c1"), changes: AttributeChanges())
        certificate.setString("another label", for: AttributeTag.label)
        expectKeychainError(.duplicateItem) {
            try opened.write(
                .certificate, primary: certificate, mode: .add, value: Self.value("c2"), changes: AttributeChanges())
        }
        // Two keys that differ only in their application tag are two items; a label is not primary.
        var key = AttributeList()
        key.setString("1", for: AttributeTag.keyClass)
        key[AttributeTag.applicationTag] = Array("first".utf8)
        try opened.write(.key, primary: key, mode: .add, value: Self.value("k1"), changes: AttributeChanges())
        key[AttributeTag.applicationTag] = Array("second".utf8)
        try opened.write(.key, primary: key, mode: .add, value: Self.value("k2"), changes: AttributeChanges())
        key.setString("a label", for: AttributeTag.label)
        expectKeychainError(.duplicateItem) {
            try opened.write(.key, primary: key, mode: .add, value: Self.value("k3"), changes: AttributeChanges())
        }
        #expect(try opened.query(ItemQuery(itemClass: .key)).count == 2)
        // SecItem code stores generic passwords without a service (keychain-swift keys by account
        // alone): absent names the same item as empty, and a second add is a duplicate.
        try opened.write(
            .internetPassword, primary: AttributeList(), mode: .add, value: Self.value("x"), changes: AttributeChanges()
        )
        var empty = AttributeList()
        empty.setString("", for: AttributeTag.server)
        expectKeychainError(.duplicateItem) {
            try opened.write(
                .internetPassword, primary: empty, mode: .add, value: Self.value("y"), changes: AttributeChanges())
        }
        #expect(
            try opened.query(ItemQuery(itemClass: .internetPassword, returnsData: true)).map(\.value) == [
                Array("x".utf8)
            ])
    }

    @Test("a file moved into another group is tampering for a query, never skipped")
    func misplacedFilesAreReported() throws {
        let store = try EngineStore()
        let opened = try store.open()
        defer { opened.close() }
        try opened.write(
            .internetPassword, primary: Self.internet("a.example.com", account: "x"), mode: .add,
            value: Self.value("1"),
            changes: AttributeChanges())
        try opened.write(
            .internetPassword, primary: Self.internet("b.example.com", account: "y"), mode: .add,
            value: Self.value("2"),
            changes: AttributeChanges())
        let files = try store.itemFiles()
        let target = (files[1] as NSString).deletingLastPathComponent + "/" + (files[0] as NSString).lastPathComponent
        try FileManager.default.moveItem(atPath: files[0], toPath: target)
        expectKeychainError(.tampered) { _ = try opened.query(ItemQuery(itemClass: .internetPassword)) }
    }
}

import KeychainVocabulary
import Testing

@testable import SecretService

/// A collection's index: SearchItems by any subset of attributes, kept current by writes.
@Suite("the item index")
struct ItemIndexTests {
    static func item(_ account: String, _ attributes: [String: String], created: UInt64) throws -> SecretItem {
        let identity = try ItemIdentity(accessGroup: "", service: "svc", account: account)
        return SecretItem(
            id: SecretItem.id(of: identity), identity: identity, label: account, attributes: attributes,
            contentType: "text/plain", created: created, modified: created, isProtected: false)
    }

    @Test("a search returns the items with every queried attribute, oldest first; an empty query all")
    func searchesBySubsets() throws {
        let mail = try Self.item("mail", ["app": "mail", "user": "ann"], created: 2)
        let chat = try Self.item("chat", ["app": "chat", "user": "ann"], created: 1)
        let bob = try Self.item("bob", ["app": "mail", "user": "bob"], created: 3)
        let index = ItemIndex([mail, chat, bob])
        #expect(index.search(["user": "ann"]).map(\.label) == ["chat", "mail"])
        #expect(index.search(["app": "mail", "user": "ann"]).map(\.label) == ["mail"])
        #expect(index.search(["app": "mail", "user": "carl"]).isEmpty)
        #expect(index.search(["nothing": "here"]).isEmpty)
        #expect(index.search([:]).map(\.label) == ["chat", "mail", "bob"])
        #expect(index.exactly(["app": "mail"]).isEmpty)
        #expect(index.exactly(["app": "mail", "user": "bob"]).map(\.label) == ["bob"])
    }

    @Test("an insert with the same ID replaces the item and its postings; a remove leaves no trace")
    func replacesAndRemoves() throws {
        var index = ItemIndex([try Self.item("mail", ["app": "mail"], created: 1)])
        let moved = try Self.item("mail", ["app": "calendar"], created: 1)
        index.insert(moved)
        #expect(index.search(["app": "mail"]).isEmpty)
        #expect(index.search(["app": "calendar"]).map(\.id) == [moved.id])
        index.remove(moved.id)
        #expect(index[moved.id] == nil && index.search([:]).isEmpty && index.search(["app": "calendar"]).isEmpty)
    }
}

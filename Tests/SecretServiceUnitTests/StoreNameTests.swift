import Testing

@testable import SecretService

/// The store a new collection gets, from its label or alias.
@Suite("new collections' store names")
struct StoreNameTests {
    func name(_ text: String, taken: Set<String> = []) -> String {
        ServiceObject.storeName(preferring: text) { taken.contains($0) }
    }

    @Test("lowercased; letters, digits, - and _ kept, every other character _")
    func characters() {
        #expect(name("Work") == "work")
        #expect(name("My Keys/2") == "my_keys_2")
        #expect(name("a-b_c.d") == "a-b_c_d")
        #expect(name("Ünïcödé") == "ünïcödé")
        #expect(name("../etc") == "___etc")
        #expect(name(String(repeating: "x", count: 100)) == String(repeating: "x", count: 64))
    }

    @Test("nothing left, or the in-memory collection's name, becomes \"collection\"")
    func reservedNames() {
        #expect(name("") == "collection")
        #expect(name("Session") == "collection")
    }

    @Test("a taken name gets the first free number from 2")
    func takenNames() {
        #expect(name("Work", taken: ["work"]) == "work2")
        #expect(name("Work", taken: ["work", "work2", "work3"]) == "work4")
        #expect(name("", taken: ["collection"]) == "collection2")
    }
}

import Crypto
import Foundation
import KeychainVocabulary
import TPMKeychainTesting
import Testing

@testable import KeychainStore

/// Fixtures/item-v2.json, written by Fixtures/make-item-vector-v2.py from docs/FORMAT.md alone.
struct ItemV2Vector: Decodable {
    struct Item: Decodable {
        let `class`: String
        let itemID: String
        let generation: UInt64
        let accessibility, valueKind: UInt8
        let attributes: [String: String]
        let value, salt, nonce, groupDirectory, fileName, file: String
    }
    let masterKey, storeID: String
    let items: [Item]
}

@Suite struct ItemFormatV2VectorTests {
    static let vector: ItemV2Vector? = try? ProjectFixtures.load("item-v2.json", as: ItemV2Vector.self)

    static func contents(_ item: ItemV2Vector.Item) throws -> ItemFileV2.Contents {
        var attributes = AttributeList()
        for (tag, value) in item.attributes {
            attributes[try #require(FourCharacterCode(text: tag))] = hex(value)
        }
        let code = try #require(FourCharacterCode(text: item.class))
        let itemClass = try #require(ItemClass(rawValue: code.rawValue))
        return ItemFileV2.Contents(
            itemID: hex(item.itemID), generation: item.generation, itemClass: itemClass,
            keyRecord: ItemFileV2.masterKeyRecord,
            accessibility: try #require(Accessibility(rawValue: item.accessibility)),
            kind: try #require(ValueKind(rawValue: item.valueKind)), attributes: attributes, value: hex(item.value))
    }

    static func keys(_ vector: ItemV2Vector) -> StoreKeys {
        StoreKeys(masterKey: SymmetricKey(data: hex(vector.masterKey)), storeID: hex(vector.storeID))
    }

    @Test(
        "the codec writes exactly the bytes, names and directories an independent implementation of FORMAT.md computes")
    func encodesTheKnownAnswers() throws {
        let vector = try #require(Self.vector)
        let keys = Self.keys(vector)
        #expect(vector.items.count == 2)
        for item in vector.items {
            let contents = try Self.contents(item)
            let encoded = try ItemFileV2.encode(
                contents, itemKeyParent: keys.items, storeID: hex(vector.storeID),
                salt: hex(item.salt), nonce: hex(item.nonce))
            #expect(encoded == hex(item.file), "\(item.class)")
            #expect(ItemFileV2.fileName(of: contents.itemClass, contents.attributes, keys: keys) == item.fileName)
            #expect(
                ItemFileV2.groupName(of: contents.itemClass, contents.attributes, keys: keys) == item.groupDirectory)
        }
    }

    @Test("the codec reads the known answers back, keeps unknown tags, and refuses the file for another item")
    func decodesTheKnownAnswers() throws {
        let vector = try #require(Self.vector)
        let keys = Self.keys(vector)
        for item in vector.items {
            let expected = try Self.contents(item)
            let primaryKey = expected.itemClass.encodedPrimaryKey(of: expected.attributes)
            let decoded = try ItemFileV2.decode(
                hex(item.file), itemKeyParent: keys.items, storeID: hex(vector.storeID),
                expectedPrimaryKey: primaryKey, path: "vector")
            #expect(decoded == expected)
            var other = expected.attributes
            other.setString("mallory", for: AttributeTag.account)
            #expect(throws: KeychainError.self) {
                _ = try ItemFileV2.decode(
                    hex(item.file), itemKeyParent: keys.items, storeID: hex(vector.storeID),
                    expectedPrimaryKey: expected.itemClass.encodedPrimaryKey(of: other), path: "vector")
            }
        }
        let generic = try Self.contents(vector.items[0])
        #expect(generic.attributes.string(AttributeTag.label) == "API token")
        #expect(generic.attributes.nanoseconds(AttributeTag.creationDate) == 1_700_000_000_000_000_001)
        #expect(
            generic.attributes[try #require(FourCharacterCode(text: "zzzz"))]
                == Array("a tag this version does not know".utf8))
        let internet = try Self.contents(vector.items[1])
        #expect(internet.attributes.uint32(AttributeTag.port) == 443)
        #expect(internet.attributes.uint32(AttributeTag.protocol) == FourCharacterCode("htps").rawValue)
        #expect(internet.attributes.bool(AttributeTag.synchronizable) == false)
    }

    @Test("every single-byte change of a format-2 file is tampering, never other data")
    func everyByteIsAuthenticated() throws {
        let vector = try #require(Self.vector)
        let keys = Self.keys(vector)
        let item = vector.items[1]
        let original = hex(item.file)
        let expected = try Self.contents(item)
        let primaryKey = expected.itemClass.encodedPrimaryKey(of: expected.attributes)
        for position in original.indices {
            var damaged = original
            damaged[position] ^= 0x01
            #expect(throws: KeychainError.self, "byte \(position)") {
                _ = try ItemFileV2.decode(
                    damaged, itemKeyParent: keys.items, storeID: hex(vector.storeID),
                    expectedPrimaryKey: primaryKey, path: "vector")
            }
        }
        for length in [0, 4, 123, 124, original.count - 1] {
            #expect(throws: KeychainError.self, "length \(length)") {
                _ = try ItemFileV2.decode(
                    Array(original.prefix(length)), itemKeyParent: keys.items, storeID: hex(vector.storeID),
                    expectedPrimaryKey: primaryKey, path: "vector")
            }
        }
    }

    @Test("tagged attributes: canonical order, typed values, clearing, and refusal of what no writer produces")
    func attributeLists() throws {
        var attributes = AttributeList()
        attributes.setString("svc", for: AttributeTag.service)
        attributes.setString("alice", for: AttributeTag.account)
        attributes.setUInt32(8443, for: AttributeTag.port)
        attributes.setBool(true, for: AttributeTag.synchronizable)
        attributes.setNanoseconds(-5, for: AttributeTag.creationDate)
        let encoded = attributes.encoded()
        let decoded = try AttributeList(decoding: encoded, path: "test")
        #expect(decoded == attributes)
        #expect(decoded.tags == decoded.tags.sorted())
        #expect(decoded.nanoseconds(AttributeTag.creationDate) == -5)
        attributes.setString(nil, for: AttributeTag.account)
        #expect(attributes.string(AttributeTag.account) == nil)
        #expect(
            try AttributeList(decoding: attributes.encoded(), path: "test").tags.contains(AttributeTag.account) == false
        )

        // Built in any order, and changed in place, a list is the same canonical bytes.
        var reordered = AttributeList()
        reordered.setNanoseconds(-5, for: AttributeTag.creationDate)
        reordered.setBool(true, for: AttributeTag.synchronizable)
        reordered.setUInt32(1, for: AttributeTag.port)
        reordered.setString("svc", for: AttributeTag.service)
        reordered.setString("a much longer account than before", for: AttributeTag.account)
        reordered.setUInt32(8443, for: AttributeTag.port)
        #expect(reordered != decoded)
        reordered.setString("alice", for: AttributeTag.account)
        #expect(reordered == decoded && reordered.encoded() == encoded)
        #expect(reordered.hashValue == decoded.hashValue)
        #expect(reordered.uint32(AttributeTag.port) == 8443 && reordered.string(AttributeTag.service) == "svc")
        #expect(reordered.value(AttributeTag.account, equals: Array("alice".utf8)))
        #expect(!reordered.value(AttributeTag.account, equals: Array("alic".utf8)))
        #expect(!reordered.value(AttributeTag.label, equals: []) && reordered.value(AttributeTag.label, equals: nil))
        // Empty is not absent; text that is not UTF-8 reads as no text but keeps its bytes.
        reordered[AttributeTag.label] = []
        #expect(reordered.string(AttributeTag.label) == "" && reordered.value(AttributeTag.label, equals: []))
        reordered[AttributeTag.comment] = [0xFF, 0x41]
        #expect(reordered.string(AttributeTag.comment) == nil && reordered[AttributeTag.comment] == [0xFF, 0x41])
        #expect(try AttributeList(decoding: reordered.encoded(), path: "test") == reordered)

        // Out of order, repeated, truncated, oversized.
        let acct: [UInt8] = [0x61, 0x63, 0x63, 0x74]
        let svce: [UInt8] = [0x73, 0x76, 0x63, 0x65]
        for bad in [
            svce + [0, 0, 0, 0] + acct + [0, 0, 0, 0], acct + [0, 0, 0, 0] + acct + [0, 0, 0, 0],
            acct + [0, 0, 0, 5, 1], acct + [0, 2, 0, 0],
        ] {
            #expect(throws: KeychainError.self) { _ = try AttributeList(decoding: bad, path: "test") }
        }
        // Absent sync and sync = false name the same generic password; an empty service does not equal an absent one's sibling.
        var explicit = AttributeList()
        explicit.setString("svc", for: AttributeTag.service)
        var implicit = explicit
        explicit.setBool(false, for: AttributeTag.synchronizable)
        #expect(
            ItemClass.genericPassword.encodedPrimaryKey(of: explicit)
                == ItemClass.genericPassword.encodedPrimaryKey(of: implicit))
        implicit.setBool(true, for: AttributeTag.synchronizable)
        #expect(
            ItemClass.genericPassword.encodedPrimaryKey(of: explicit)
                != ItemClass.genericPassword.encodedPrimaryKey(of: implicit))
        #expect(
            ItemClass.genericPassword.encodedPrimaryKey(of: explicit)
                != ItemClass.internetPassword.encodedPrimaryKey(of: explicit))
    }
}

import Crypto
import Foundation
import KeychainVocabulary
import TPMKeychainTesting
import Testing

@testable import KeychainStore

/// Fixtures/item-v1.json, written by Fixtures/make-item-vector.py from docs/FORMAT.md alone.
struct ItemVector: Decodable {
    struct Inputs: Decodable {
        let masterKey, storeID, itemID, salt, nonce, value, genericData: String
        let generation: UInt64
        let accessibility, valueKind: UInt8
        let accessGroup, service, account: String
        let label, comment: String?
        let creationMilliseconds, modificationMilliseconds: Int64
    }
    let inputs: Inputs
    let serviceDirectory: String
    let itemFileName: String
    let file: String
}

func hex(_ text: String) -> [UInt8] {
    var bytes: [UInt8] = []
    var index = text.startIndex
    while index < text.endIndex {
        let next = text.index(index, offsetBy: 2)
        bytes.append(UInt8(text[index..<next], radix: 16) ?? 0)
        index = next
    }
    return bytes
}

@Suite struct ItemFormatVectorTests {
    static func load() throws -> ItemVector { try ProjectFixtures.load("item-v1.json", as: ItemVector.self) }

    static func record(_ inputs: ItemVector.Inputs) throws -> ItemRecord {
        let attributes = ItemAttributes(
            service: inputs.service, account: inputs.account, accessGroupName: inputs.accessGroup, label: inputs.label,
            comment: inputs.comment, genericData: Data(hex(inputs.genericData)),
            creationDate: Date(timeIntervalSince1970: Double(inputs.creationMilliseconds) / 1000),
            modificationDate: Date(timeIntervalSince1970: Double(inputs.modificationMilliseconds) / 1000),
            accessibility: try #require(Accessibility(rawValue: inputs.accessibility)))
        return ItemRecord(
            itemID: hex(inputs.itemID), generation: inputs.generation, attributes: attributes,
            value: ItemValue(kind: try #require(ValueKind(rawValue: inputs.valueKind)), bytes: hex(inputs.value)))
    }

    @Test("The store writes exactly the bytes an independent implementation of FORMAT.md computes")
    func encodesTheKnownAnswer() throws {
        let vector = try Self.load()
        let keys = StoreKeys(
            masterKey: SymmetricKey(data: hex(vector.inputs.masterKey)), storeID: hex(vector.inputs.storeID))
        let encoded = try ItemFileV1.encode(
            try Self.record(vector.inputs), keys: keys, storeID: hex(vector.inputs.storeID),
            salt: hex(vector.inputs.salt), nonce: hex(vector.inputs.nonce))
        #expect(encoded == hex(vector.file))
        #expect(keys.name("service", [vector.inputs.accessGroup, vector.inputs.service]) == vector.serviceDirectory)
        #expect(
            keys.name("item", [vector.inputs.accessGroup, vector.inputs.service, vector.inputs.account]) + ".item"
                == vector.itemFileName)
    }

    @Test func decodesTheKnownAnswer() throws {
        let vector = try Self.load()
        let storeID = hex(vector.inputs.storeID)
        let keys = StoreKeys(masterKey: SymmetricKey(data: hex(vector.inputs.masterKey)), storeID: storeID)
        let file = hex(vector.file)
        let header = try ItemFileV1.decodeHeader(
            file[0..<ItemFileV1.headerSize], fileSize: file.count, storeID: storeID, path: "vector")
        let key = keys.itemKey(salt: header.salt, storeID: storeID)
        let identity = try ItemIdentity(
            accessGroup: vector.inputs.accessGroup, service: vector.inputs.service, account: vector.inputs.account)
        let attributes = try ItemFileV1.decryptAttributes(
            file[header.attributesRange], header: header, key: key,
            expected: identity, path: "vector")
        let value = try ItemFileV1.decryptSecret(of: file, header: header, key: key, identity: identity, path: "vector")
        #expect(attributes == (try Self.record(vector.inputs)).attributes)
        #expect(value.bytes == hex(vector.inputs.value))
        #expect(header.generation == vector.inputs.generation)
        let other = try ItemIdentity(accessGroup: "", service: vector.inputs.service, account: "mallory")
        #expect(throws: KeychainError.self) {
            _ = try ItemFileV1.decryptAttributes(
                file[header.attributesRange], header: header, key: key, expected: other, path: "vector")
        }
        #expect(throws: KeychainError.self) {
            _ = try ItemFileV1.decryptSecret(of: file, header: header, key: key, identity: other, path: "vector")
        }
    }
}

import Crypto
import KeychainVocabulary
import Testing

@testable import KeychainStore

/// The one reader of format-1 files (`ItemFileV1+Reading.swift`), on the known-answer file of
/// Fixtures/item-v1.json: what it reads, what it returns, what it refuses.
@Suite struct FormatOneReaderTests {
    /// The vector's file, a reader over it that records every range read, and its key.
    struct Subject {
        let vector: ItemVector
        let file: [UInt8]
        let storeID: [UInt8]
        let keys: StoreKeys
        let identity: ItemIdentity

        init() throws {
            vector = try ItemFormatVectorTests.load()
            file = hex(vector.file)
            storeID = hex(vector.inputs.storeID)
            keys = StoreKeys(masterKey: SymmetricKey(data: hex(vector.inputs.masterKey)), storeID: storeID)
            identity = try ItemIdentity(
                accessGroup: vector.inputs.accessGroup, service: vector.inputs.service, account: vector.inputs.account)
        }

        func read(
            _ bytes: [UInt8]? = nil, withSecret: Bool, expected: ItemIdentity? = nil, ranges: inout [Range<Int>]
        ) throws(KeychainError) -> ItemFileV1.Read {
            let file = bytes ?? self.file
            var seen: [Range<Int>] = []
            defer { ranges = seen }
            return try ItemFileV1.read(
                fileSize: file.count, storeID: storeID, path: "vector", withSecret: withSecret, expected: expected,
                read: { (count, offset) throws(KeychainError) in
                    seen.append(offset..<offset + count)
                    return Array(file[offset..<offset + count])
                },
                key: { keys.itemKey(salt: $0.salt, storeID: storeID) })
        }
    }

    @Test("with the secret: one read of the whole file, attributes and secret as the vector says")
    func readsEverythingInOneRead() throws {
        let subject = try Subject()
        var ranges: [Range<Int>] = []
        let read = try subject.read(withSecret: true, expected: subject.identity, ranges: &ranges)
        #expect(ranges == [0..<subject.file.count])
        #expect(read.attributes == (try ItemFormatVectorTests.record(subject.vector.inputs)).attributes)
        #expect(read.value?.bytes == hex(subject.vector.inputs.value))
        #expect(read.header.generation == subject.vector.inputs.generation)
    }

    @Test("without the secret: the secret section is never read, and no value comes back")
    func leavesTheSecretUnread() throws {
        let subject = try Subject()
        var ranges: [Range<Int>] = []
        let read = try subject.read(withSecret: false, ranges: &ranges)
        #expect(read.value == nil)
        let header = read.header
        #expect(ranges == [0..<ItemFileV1.headerSize, header.attributesRange])
        #expect(ranges.allSatisfy { !$0.overlaps(header.secretRange) })
        #expect(read.attributes.account == subject.vector.inputs.account)
    }

    @Test("the secret is authenticated with the identity the attributes give, when none is expected")
    func secretWithoutAnExpectedIdentity() throws {
        let subject = try Subject()
        var ranges: [Range<Int>] = []
        #expect(try subject.read(withSecret: true, ranges: &ranges).value?.bytes == hex(subject.vector.inputs.value))
    }

    @Test("another item's identity, a flipped byte in either section, a truncated file: tampered")
    func refusesWhatIsNotThisItem() throws {
        let subject = try Subject()
        var ranges: [Range<Int>] = []
        let other = try ItemIdentity(accessGroup: "", service: subject.vector.inputs.service, account: "mallory")
        expectKeychainError(.tampered) { _ = try subject.read(withSecret: false, expected: other, ranges: &ranges) }
        let header = try ItemFileV1.decodeHeader(
            subject.file[0..<ItemFileV1.headerSize], fileSize: subject.file.count, storeID: subject.storeID,
            path: "vector")
        for offset in [header.attributesRange.lowerBound, header.secretRange.lowerBound] {
            var flipped = subject.file
            flipped[offset] ^= 0x01
            expectKeychainError(.tampered) { _ = try subject.read(flipped, withSecret: true, ranges: &ranges) }
        }
        expectKeychainError(.tampered) {
            _ = try subject.read(Array(subject.file.dropLast()), withSecret: true, ranges: &ranges)
        }
        expectKeychainError(.tampered) {
            _ = try subject.read(Array(subject.file.prefix(10)), withSecret: false, ranges: &ranges)
        }
    }
}

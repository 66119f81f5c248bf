import Crypto
import KeychainVocabulary
import TPM

/// Every parser of bytes an attacker can write (the store's files), run on arbitrary input for
/// the fuzzing harness (`Tests/Fuzz`, `Scripts/fuzz.sh`) and its corpus replay test. Each target
/// parses and discards; a crash, a trap, a hang or runaway memory is the finding, a thrown error
/// is the expected outcome.
///
/// Store IDs are taken from the input where a parser compares them, so that the fuzzer gets past
/// that check; MACs and AEAD tags use a fixed key, so random input stops at authentication, which
/// is where an attacker without the master key stops too. What is parsed after authentication
/// (the attribute list) has a target of its own.
package enum ParserFuzzing {
    package static let targets: [String] = [
        "store-meta", "item-v2", "item-v1", "key-record", "device-file", "attribute-list", "sealed-object", "manifest",
    ]

    private static let key = SymmetricKey(data: [UInt8](repeating: 0x5A, count: 32))

    /// What a run found.
    package enum Outcome: Equatable, Sendable {
        /// Parsed or refused, as it should.
        case handled
        /// A property that must hold for every input did not (the harness stops on it).
        case violated(String)
        case unknownTarget
    }

    /// Runs `target` on `bytes`.
    @discardableResult
    package static func run(_ target: String, _ bytes: [UInt8]) -> Outcome {
        let storeID = bytes.count >= 24 ? Array(bytes[8..<24]) : [UInt8](repeating: 0, count: 16)
        switch target {
        case "store-meta":
            if let parsed = try? StoreMetadata.parse(bytes, path: "fuzz") {
                _ = try? parsed.verify(metadataKey: key)
                _ = parsed.metadata.serialized(metadataKey: key)
            }
        case "item-v2":
            _ = try? ItemFileV2.decode(
                bytes, itemKeyParent: key, storeID: storeID, expectedPrimaryKey: nil, path: "fuzz")
        case "item-v1":
            if bytes.count >= ItemFileV1.headerSize,
                let header = try? ItemFileV1.decodeHeader(
                    bytes[0..<ItemFileV1.headerSize], fileSize: bytes.count, storeID: storeID, path: "fuzz")
            {
                let itemKey = StoreKeys(masterKey: key, storeID: storeID).itemKey(salt: header.salt, storeID: storeID)
                _ = try? ItemFileV1.decryptAttributes(
                    bytes[header.attributesRange], header: header, key: itemKey, expected: nil, path: "fuzz")
            }
        case "key-record":
            if let record = try? KeyRecord(parsing: bytes, storeID: storeID, metadataKey: key, path: "fuzz") {
                _ = try? record.protection()
            }
        case "device-file":
            _ = try? DeviceFile.parse(bytes, path: "fuzz")
        case "attribute-list":
            if let list = try? AttributeList(decoding: bytes, path: "fuzz") {
                // The encoding is canonical (ascending tags, each once): what decodes re-encodes to itself.
                guard list.encoded() == bytes else {
                    return .violated("an attribute list does not re-encode to the bytes it was decoded from")
                }
                for itemClass in [ItemClass.genericPassword, .internetPassword] {
                    _ = itemClass.encodedPrimaryKey(of: list)
                }
                _ = try? ItemAttributes(list, accessibility: .whenUnlocked, path: "fuzz")
            }
        case "sealed-object":
            if let sealed = try? SealedObject(serialized: bytes),
                (try? SealedObject(serialized: sealed.serialized())) == nil
            {
                return .violated("a sealed object does not parse after it was serialized again")
            }
        case "manifest":
            return manifest(bytes)
        default:
            return .unknownTarget
        }
        return .handled
    }

    /// The manifest: the input's 64-byte records get their chained MACs recomputed with the fixed
    /// key (and the header the store ID and counter it names), so the fuzzer reaches every record
    /// kind rather than stopping at the first MAC. Property: a compaction of what parsed parses to
    /// the same items, epoch and high-water mark.
    private static func manifest(_ input: [UInt8]) -> Outcome {
        var bytes = input
        var previous = [UInt8](repeating: 0, count: 16)
        var offset = 0
        while offset + Manifest.recordSize <= bytes.count {
            let mac = Manifest.mac(Array(bytes[offset..<offset + 48]), after: previous, key: key)
            bytes.replaceSubrange(offset + 48..<offset + 64, with: mac)
            previous = mac
            offset += Manifest.recordSize
        }
        let storeID = bytes.count >= 32 ? Array(bytes[16..<32]) : [UInt8](repeating: 0, count: 16)
        let index = bytes.count >= 36 ? bytes[32..<36].reduce(UInt32(0)) { $0 << 8 | UInt32($1) } : 0
        guard let state = try? Manifest.parse(bytes, key: key, storeID: storeID, counterIndex: index, path: "fuzz")
        else { return .handled }
        guard
            let again = try? Manifest.parse(
                Manifest.compacted(state, key: key), key: key, storeID: storeID, counterIndex: index, path: "fuzz"),
            again.epoch == state.epoch, again.highWater == state.highWater, again.liveCount == state.liveCount,
            again.entries.filter({ $0.value.live }) == state.entries.filter({ $0.value.live })
        else {
            return .violated(
                "a compacted manifest does not parse to the items, epoch and high-water mark it was made from")
        }
        return .handled
    }
}

import Crypto
import FoundationEssentials
import KeychainVocabulary
import TPM
import WireFormat

/// The manifest of a rollback-protected store (docs/FORMAT.md, "Manifest"): which generation of
/// which item file is current, and which epoch of the store's TPM counter the files belong to.
///
/// A sequence of 64-byte records, each authenticated by a MAC chained to the one before it, so
/// no record can be removed, reordered or replaced without breaking the chain. Only a cut at the
/// end goes unnoticed by the chain itself: the TPM counter catches a cut that removes the latest
/// epoch record, and SECURITY.md says what a cut after it can do.
///
///     offset size  field
///     0      1     kind: "H" header (first record only), "E" epoch, "W" item being written (before
///                  its file is renamed into place), "S" item written (after), "D" item being
///                  deleted (before its file goes), "X" item deleted (after)
///     1      1     format version = 1
///     2      6     "H": "TKMF" and 2 zero bytes; otherwise zero
///     8      8     "H": high-water generation, "E": the epoch (the TPM counter's value),
///                  "W"/"S"/"D"/"X": the item's generation
///     16     32    "H": store ID (16), NV index of the counter (4), 12 zero bytes;
///                  "W"/"S"/"D"/"X": the item's group directory (16) and file name (16) as raw bytes;
///                  "E": zero
///     48     16    the first 16 bytes of HMAC-SHA256(manifest key, previous record's MAC
///                  (16 zero bytes before the header) || bytes 0 ..< 48)
struct Manifest {
    static let fileName = "manifest"
    static let recordSize = 64
    static let version: UInt8 = 1
    static let magic = Array("TKMF".utf8)
    /// Larger than this (and four times what the live items need) and a writer compacts it.
    static let compactionThreshold = 256 * 1024
    /// The largest manifest a reader accepts (256 compactions' worth): anything bigger was not
    /// written by a writer (a sparse file planted to exhaust memory) and is refused before it is read.
    static let maximumSize = compactionThreshold * 256

    enum Kind: UInt8 {
        case header = 0x48 // "H"
        case epoch = 0x45 // "E"
        case writing = 0x57 // "W"
        case set = 0x53 // "S"
        case deleting = 0x44 // "D"
        case deleted = 0x58 // "X"
    }

    /// An item file: its group directory's and its own name, as the 32 hex digits of each.
    struct ItemPath: Hashable, Sendable {
        let group: String
        let file: String
    }

    /// An item file's name as the manifest keys it: its 128 bits, which hash faster than the
    /// name's 37 characters on every get.
    struct ItemKey: Hashable, Sendable {
        let high: UInt64
        let low: UInt64

        init(_ bytes: ArraySlice<UInt8>) {
            high = BigEndian.integer(bytes.prefix(8))
            low = BigEndian.integer(bytes.dropFirst(8).prefix(8))
        }

        /// The key of `<32 hex digits>.item`, or nil for any other name. Parsed in place, byte
        /// by byte: a listing parses one per file.
        init?(fileName: String) {
            var name = fileName
            let parsed = name.withUTF8 { (utf8) -> (UInt64, UInt64)? in
                guard utf8.count == 37, utf8[32] == UInt8(ascii: "."), utf8[33] == UInt8(ascii: "i"),
                    utf8[34] == UInt8(ascii: "t"), utf8[35] == UInt8(ascii: "e"), utf8[36] == UInt8(ascii: "m"),
                    let high = Self.hexWord(utf8, from: 0), let low = Self.hexWord(utf8, from: 16)
                else { return nil }
                return (high, low)
            }
            guard let parsed else { return nil }
            self.high = parsed.0
            self.low = parsed.1
        }

        /// The 16 hex digits from `start` as a number, or nil when one is not a hex digit.
        private static func hexWord(_ utf8: UnsafeBufferPointer<UInt8>, from start: Int) -> UInt64? {
            var word: UInt64 = 0
            for index in start..<start + 16 {
                let character = utf8[index]
                let lowered = character | 0x20 // "A"-"F" to "a"-"f"; digits keep their value
                let digit: UInt8
                if character &- UInt8(ascii: "0") < 10 {
                    digit = character &- UInt8(ascii: "0")
                } else if lowered &- UInt8(ascii: "a") < 6 {
                    digit = lowered &- UInt8(ascii: "a") &+ 10
                } else {
                    return nil
                }
                word = word << 4 | UInt64(digit)
            }
            return word
        }

        var bytes: [UInt8] {
            (0..<16).map { UInt8(truncatingIfNeeded: ($0 < 8 ? high : low) >> UInt64(8 * (7 - $0 % 8))) }
        }
        var fileName: String { bytes.hexString + Manifest.itemSuffix }
    }

    struct Entry: Sendable, Equatable {
        var generation: UInt64
        var live: Bool
        var group: String
        /// For a deleted item: its file is known to be gone (a "D" without its "X" is a delete
        /// that may have died before unlinking).
        var finished = false
        /// A write under way, or one whose writer died between its "W" and its "S": the file may
        /// already be this generation, or still the one the rest of the entry describes.
        var pending: UInt64? = nil
    }

    /// What the records say, read up to ``validSize``.
    struct State: Sendable {
        let storeID: [UInt8]
        let counterIndex: UInt32
        /// No item generation at or below this is new: an item file the manifest does not list
        /// with a generation up to here was deleted (or never belonged).
        var highWater: UInt64
        /// The latest epoch record: the counter's value when the last writer started its epoch.
        var epoch: UInt64 = 0
        /// Entries by item file name (unique in a store: it keys the item's whole primary key).
        var entries: [ItemKey: Entry] = [:]
        var lastMAC: [UInt8]
        /// The file offset after the last record that authenticated.
        var validSize: Int
        /// Entries that are live items, kept as records are applied (a compaction decision per
        /// write must not count a large store's entries).
        var liveCount = 0
    }

    /// One record before its MAC.
    struct Record {
        let kind: Kind
        var value: UInt64 = 0
        var name: [UInt8] = [UInt8](repeating: 0, count: 32)

        func body() -> [UInt8] {
            var bytes = [kind.rawValue, Manifest.version]
            bytes += kind == .header ? Manifest.magic + [0, 0] : [UInt8](repeating: 0, count: 6)
            for shift in stride(from: 56, through: 0, by: -8) {
                bytes.append(UInt8(truncatingIfNeeded: value >> UInt64(shift)))
            }
            bytes += name
            return bytes
        }

        static func header(storeID: [UInt8], counterIndex: UInt32, highWater: UInt64) -> Record {
            var name = storeID
            for shift in [24, 16, 8, 0] { name.append(UInt8(truncatingIfNeeded: counterIndex >> UInt32(shift))) }
            return Record(kind: .header, value: highWater, name: name + [UInt8](repeating: 0, count: 12))
        }

        static func item(_ kind: Kind, _ path: ItemPath, generation: UInt64) -> Record? {
            guard let file = ItemKey(fileName: path.file), let group = [UInt8](hexString: path.group), group.count == 16
            else { return nil }
            return Record(kind: kind, value: generation, name: group + file.bytes)
        }
    }

    static let itemSuffix = ".item"

    /// The MAC chained after `previous`.
    static func mac(_ body: [UInt8], after previous: [UInt8], key: SymmetricKey) -> [UInt8] {
        RecordMAC(key: key).mac(body[...], after: previous)
    }

    /// The record MAC with its key set up once: a manifest of 100,000 records is checked on every
    /// open, and keying HMAC per record, through the generic `update(data:)`, cost more than the
    /// hashing itself. ManifestMACTests check it against swift-crypto's HMAC.
    /// A store keeps one in its keys (``StoreKeys/manifestMAC``): each append encodes and applies
    /// its records with it, and preparing it per call was two SHA-256 blocks each time.
    struct RecordMAC: Sendable {
        private let keyed: PreparedHMAC

        init(key: SymmetricKey) { keyed = PreparedHMAC(key: key) }

        /// HMAC-SHA256(key, previous ‖ body), first 16 bytes.
        func mac(_ body: ArraySlice<UInt8>, after previous: [UInt8]) -> [UInt8] {
            keyed.authenticationCode(previous[...], body).withUnsafeBytes { Array($0.prefix(16)) }
        }
    }

    /// The bytes of `records` chained after `previous`.
    static func encode(_ records: [Record], after previous: [UInt8], key: SymmetricKey) -> [UInt8] {
        encode(records, after: previous, macs: RecordMAC(key: key))
    }

    /// The bytes of `records` chained after `previous`, with the store's prepared record MAC.
    static func encode(_ records: [Record], after previous: [UInt8], macs recordMAC: RecordMAC) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(records.count * recordSize)
        var last = previous
        for record in records {
            let body = record.body()
            last = recordMAC.mac(body[...], after: last)
            bytes += body
            bytes += last
        }
        return bytes
    }

}

/// Compares two MACs in time that depends only on their length, as every other MAC check of the
/// store does through swift-crypto.
func constantTimeEqual<A: Collection<UInt8>, B: Collection<UInt8>>(_ a: A, _ b: B) -> Bool {
    guard a.count == b.count else { return false }
    var difference: UInt8 = 0
    for (x, y) in zip(a, b) { difference |= x ^ y }
    return difference == 0
}

/// The same over contiguous bytes, which the manifest's per-record check uses: the generic one
/// walks both through their iterators, a cost a 100,000-record manifest pays on every open.
func constantTimeEqual(_ a: [UInt8], _ b: ArraySlice<UInt8>) -> Bool {
    guard a.count == b.count else { return false }
    return a.withUnsafeBytes { x in
        b.withUnsafeBytes { y in
            var difference: UInt8 = 0
            for index in 0..<x.count { difference |= x[index] ^ y[index] }
            return difference == 0
        }
    }
}

import Crypto
import KeychainVocabulary
import SystemCalls
import WireFormat

#if canImport(Glibc)
import Glibc
#endif

/// What decrypting a write gave, so that the same bytes are not decrypted twice: item keys by
/// the write's random salt (an HKDF each), what a listing derived from each write it read, and
/// what this process's own last writes sealed. A hit is only ever used for a file holding
/// exactly the bytes it came from; GCM still authenticates every byte read.
final class DecryptionCache: Sendable {
    private struct Entries {
        var itemKeys: [WriteSalt: SymmetricKey] = [:]
        /// Kept apart from ``itemKeys`` so that listings do not churn the get path's cache, and
        /// large enough for a listing of ``ItemStore/listingLimit`` items.
        var listed: [WriteSalt: ListedWrite] = [:]
        /// One entry per item file, the latest write's, for the last ``ItemStore/writtenLimit`` items.
        var written: [String: ListedWrite] = [:]
    }

    private let entries = Locked(Entries())

    /// The item key of the write with `salt`: cached, or derived and remembered.
    func itemKey(_ salt: WriteSalt, derive: () -> SymmetricKey) -> SymmetricKey {
        if let cached = entries.withLock({ $0.itemKeys[salt] }) { return cached }
        let key = derive()
        entries.withLock { entries in
            if entries.itemKeys.count >= ItemStore.cacheLimit { entries.itemKeys.removeAll(keepingCapacity: true) }
            entries.itemKeys[salt] = key
        }
        return key
    }

    /// The attributes and file name a listing derived from the write with `salt`, when `header`
    /// and `sealed` are byte for byte what it read. Compared in place: a copy of the entry would
    /// touch (retain) each of its buffers, a cache miss apiece in a listing of thousands.
    func listed(
        _ salt: WriteSalt, holding header: [UInt8], sealed: ArraySlice<UInt8>
    ) -> (attributes: AttributeList, file: String)? {
        entries.withLock { entries in
            guard let index = entries.listed.index(forKey: salt),
                entries.listed.values[index].holds(header: header, sealed: sealed)
            else { return nil }
            return (entries.listed.values[index].attributes, entries.listed.values[index].file)
        }
    }

    func rememberListed(_ write: ListedWrite, salt: WriteSalt) {
        entries.withLock { entries in
            if entries.listed.count >= ItemStore.listingLimit { entries.listed.removeAll(keepingCapacity: true) }
            entries.listed[salt] = write
        }
    }

    func written(_ file: String) -> ListedWrite? {
        entries.withLock { $0.written[file] }
    }

    func rememberWritten(_ write: ListedWrite, file: String) {
        entries.withLock { entries in
            if entries.written.count >= ItemStore.writtenLimit, entries.written[file] == nil {
                entries.written.removeAll(keepingCapacity: true)
            }
            entries.written[file] = write
        }
    }

    func removeAll() {
        entries.withLock { $0 = Entries() }
    }
}

/// What a listing derived from one write: its decrypted attributes and the file name their
/// primary key gives, with the header and sealed attributes section they came from. A later
/// listing that reads exactly those bytes again (compared whole, not by hash) has the same
/// ciphertext, tag, nonce and AAD under the same key, which GCM authenticated and which decrypt
/// to the same attributes: it skips the key derivation, the decryption and the decoding, and still
/// checks the name, the group and the generation of the file it read. Any other bytes, also under
/// a known salt, are opened and authenticated.
struct ListedWrite {
    /// The header, then the sealed attributes section (ciphertext and tag), as read.
    private let sealedPrefix: [UInt8]
    private let headerSize: Int
    let attributes: AttributeList
    let file: String

    init(header: [UInt8], sealed: ArraySlice<UInt8>, attributes: AttributeList, file: String) {
        var prefix: [UInt8] = []
        prefix.reserveCapacity(header.count + sealed.count)
        prefix.append(contentsOf: header)
        prefix.append(contentsOf: sealed)
        sealedPrefix = prefix
        headerSize = header.count
        self.attributes = attributes
        self.file = file
    }

    func holds(header: [UInt8], sealed: ArraySlice<UInt8>) -> Bool {
        headerSize == header.count && Self.same(sealedPrefix[..<headerSize], header[...])
            && Self.same(sealedPrefix[headerSize...], sealed)
    }

    private static func same(_ lhs: ArraySlice<UInt8>, _ rhs: ArraySlice<UInt8>) -> Bool {
        guard lhs.count == rhs.count else { return false }
        return lhs.isEmpty
            || lhs.withUnsafeBytes { left in
                rhs.withUnsafeBytes { right in memcmp(left.baseAddress!, right.baseAddress!, left.count) == 0 }
            }
    }
}

/// A write's 32-byte random salt as the caches' key: four words, hashed and compared as such,
/// where a byte slice would be hashed byte by byte and kept alive with the whole header.
struct WriteSalt: Hashable {
    private let words: (UInt64, UInt64, UInt64, UInt64)

    init(_ bytes: ArraySlice<UInt8>) {
        func word(_ index: Int) -> UInt64 { BigEndian.integer(bytes.dropFirst(8 * index).prefix(8)) }
        words = (word(0), word(1), word(2), word(3))
    }

    static func == (lhs: WriteSalt, rhs: WriteSalt) -> Bool {
        lhs.words.0 == rhs.words.0 && lhs.words.1 == rhs.words.1 && lhs.words.2 == rhs.words.2
            && lhs.words.3 == rhs.words.3
    }

    func hash(into hasher: inout Hasher) {
        hasher.combine(words.0)
        hasher.combine(words.1)
        hasher.combine(words.2)
        hasher.combine(words.3)
    }
}

import Crypto

/// HMAC-SHA256 (RFC 2104) with its key set up once: the inner and outer SHA-256 states after the
/// padded key blocks, copied for each message. The store computes one per name (two per item a
/// get has not seen) and one per manifest record (100,000 on opening a store that size), where
/// keying HMAC each time, and swift-crypto's generic `update(data:)`, cost more than the hashing.
/// ManifestMACTests check it against swift-crypto's HMAC.
struct PreparedHMAC {
    private let inner: SHA256
    private let outer: SHA256

    init(key: SymmetricKey) {
        var block = key.withUnsafeBytes { raw -> [UInt8] in
            raw.count > 64 ? Array(SHA256.hash(data: raw)) : Array(raw)
        }
        block += [UInt8](repeating: 0, count: 64 - block.count)
        var inner = SHA256()
        var outer = SHA256()
        let innerPad = block.map { $0 ^ 0x36 }
        let outerPad = block.map { $0 ^ 0x5C }
        innerPad.withUnsafeBytes { inner.update(bufferPointer: $0) }
        outerPad.withUnsafeBytes { outer.update(bufferPointer: $0) }
        for index in block.indices { block[index] = 0 }
        self.inner = inner
        self.outer = outer
    }

    /// HMAC-SHA256(key, the parts concatenated).
    func authenticationCode(_ parts: ArraySlice<UInt8>...) -> SHA256.Digest {
        var innerHash = inner
        for part in parts { part.withUnsafeBytes { innerHash.update(bufferPointer: $0) } }
        var outerHash = outer
        innerHash.finalize().withUnsafeBytes { outerHash.update(bufferPointer: $0) }
        return outerHash.finalize()
    }
}

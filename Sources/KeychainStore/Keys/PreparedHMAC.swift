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
        (inner, outer) = key.withUnsafeBytes { Self.states(key: $0) }
    }

    /// Keyed with raw bytes (a salt, or a digest just computed), without making a key of them.
    init(keyBytes: UnsafeRawBufferPointer) {
        (inner, outer) = Self.states(key: keyBytes)
    }

    /// The states after the inner and outer pads; the padded key blocks are zeroed after use.
    private static func states(key: UnsafeRawBufferPointer) -> (SHA256, SHA256) {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 64) { block in
            block.initialize(repeating: 0)
            defer { block.update(repeating: 0) }
            if key.count > 64 {
                SHA256.hash(data: key).withUnsafeBytes { digest in
                    for (index, byte) in digest.enumerated() { block[index] = byte }
                }
            } else {
                for (index, byte) in key.enumerated() { block[index] = byte }
            }
            var inner = SHA256()
            var outer = SHA256()
            for index in block.indices { block[index] ^= 0x36 }
            inner.update(bufferPointer: UnsafeRawBufferPointer(block))
            for index in block.indices { block[index] ^= 0x36 ^ 0x5C }
            outer.update(bufferPointer: UnsafeRawBufferPointer(block))
            return (inner, outer)
        }
    }

    /// HMAC-SHA256(key, the parts concatenated).
    func authenticationCode(_ parts: ArraySlice<UInt8>...) -> SHA256.Digest {
        authenticationCode(parts: parts)
    }

    /// HMAC-SHA256(key, the parts concatenated).
    func authenticationCode(parts: [ArraySlice<UInt8>]) -> SHA256.Digest {
        var innerHash = inner
        for part in parts { part.withUnsafeBytes { innerHash.update(bufferPointer: $0) } }
        return finish(innerHash)
    }

    /// HMAC-SHA256(key, message) of raw bytes (key material, which is never copied into an array).
    func authenticationCode(bytes message: UnsafeRawBufferPointer) -> SHA256.Digest {
        var innerHash = inner
        innerHash.update(bufferPointer: message)
        return finish(innerHash)
    }

    private func finish(_ innerHash: SHA256) -> SHA256.Digest {
        var outerHash = outer
        innerHash.finalize().withUnsafeBytes { outerHash.update(bufferPointer: $0) }
        return outerHash.finalize()
    }
}

/// HKDF-SHA256 (RFC 5869) of a 32-byte key, the length every key of the item files has: one
/// extract, PRK = HMAC(salt, IKM), and one expand block, OKM = HMAC(PRK, info || 0x01), over
/// ``PreparedHMAC``. A write derives one per item, as does a get or listing that meets a write it
/// has not cached; swift-crypto's generic HKDF costs several times the hashing there. The same
/// bytes as `HKDF<SHA256>.deriveKey(..., outputByteCount: 32)` (ManifestMACTests).
/// An absent salt is the empty one, which HMAC pads to the same key block as RFC 5869's HashLen
/// zero bytes.
enum OneBlockHKDF {
    static func deriveKey(
        inputKeyMaterial: SymmetricKey, salt: ArraySlice<UInt8> = [], info parts: ArraySlice<UInt8>...
    ) -> SymmetricKey {
        inputKeyMaterial.withUnsafeBytes { deriveKey(inputKeyMaterial: $0, salt: salt, info: parts) }
    }

    /// From key material in memory that is zeroized elsewhere (a ``TPM/SecretBytes``), without
    /// copying it into a key first.
    static func deriveKey(
        inputKeyMaterial: UnsafeRawBufferPointer, salt: ArraySlice<UInt8> = [], info parts: ArraySlice<UInt8>...
    ) -> SymmetricKey {
        deriveKey(inputKeyMaterial: inputKeyMaterial, salt: salt, info: parts)
    }

    private static func deriveKey(
        inputKeyMaterial: UnsafeRawBufferPointer, salt: ArraySlice<UInt8>, info parts: [ArraySlice<UInt8>]
    ) -> SymmetricKey {
        let extract = salt.withUnsafeBytes { PreparedHMAC(keyBytes: $0) }
        let pseudoRandomKey = extract.authenticationCode(bytes: inputKeyMaterial)
        let expand = pseudoRandomKey.withUnsafeBytes { PreparedHMAC(keyBytes: $0) }
        return expand.authenticationCode(parts: parts + [[1][...]]).withUnsafeBytes { SymmetricKey(data: $0) }
    }
}

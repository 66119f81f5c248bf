import Crypto
import KeychainVocabulary
import SystemCalls
import TPM

/// A 32-byte secret encrypted to a recovery key's public half, the shape `recovery.key` and
/// `passcode.escrow` share (docs/FORMAT.md): a file's own header, then
///
///     32   ephemeral public key E (X25519, new for every write)
///     12   nonce (random)
///     48   AES-256-GCM(K, nonce, secret, AAD = everything before): ciphertext ‖ tag
///
/// K = HKDF-SHA256(IKM = X25519(e, P_R) = X25519(R, E), salt = E ‖ P_R, info = the file's info ‖
/// store ID). Encrypted *to* P_R, so that a writer needs only the public half; only the person
/// who holds the recovery key R opens it.
enum RecoveryBox {
    /// The bytes after a header.
    static let size = 32 + 12 + 32 + 16

    /// `header` followed by `secret`'s box for the recovery key whose public half is `recoveryPublicKey`.
    static func seal(
        _ secret: SecretBytes, after header: [UInt8], recoveryPublicKey: [UInt8], info: [UInt8], storeID: [UInt8]
    ) throws -> [UInt8] {
        let ephemeral = Curve25519.KeyAgreement.PrivateKey()
        let shared = try ephemeral.sharedSecretFromKeyAgreement(
            with: try Curve25519.KeyAgreement.PublicKey(rawRepresentation: recoveryPublicKey))
        let ephemeralPublic = Array(ephemeral.publicKey.rawRepresentation)
        let nonce = randomBytes(12)
        let authenticated = header + ephemeralPublic + nonce
        let key = Self.key(
            shared, ephemeral: ephemeralPublic, recovery: recoveryPublicKey, info: info, storeID: storeID)
        let box = try secret.withUnsafeBytes { plaintext in
            try AES.GCM.seal(
                plaintext, using: key, nonce: try AES.GCM.Nonce(data: nonce), authenticating: authenticated)
        }
        return authenticated + Array(box.ciphertext) + Array(box.tag)
    }

    /// The secret in the box that follows `headerSize` bytes of `bytes`, opened with `recoveryKey`
    /// (whose public half the caller has checked is `recoveryPublicKey`); copied into locked memory.
    static func open(
        _ bytes: [UInt8], headerSize: Int, recoveryKey: SecretBytes, recoveryPublicKey: [UInt8], info: [UInt8],
        storeID: [UInt8]
    ) throws -> SecretBytes {
        let ephemeral = Array(bytes[headerSize..<headerSize + 32])
        let shared = try recoveryKey.withUnsafeBytes { raw in
            try Curve25519.KeyAgreement.PrivateKey(rawRepresentation: raw)
                .sharedSecretFromKeyAgreement(with: try Curve25519.KeyAgreement.PublicKey(rawRepresentation: ephemeral))
        }
        let key = Self.key(shared, ephemeral: ephemeral, recovery: recoveryPublicKey, info: info, storeID: storeID)
        let boxStart = headerSize + 44
        let box = try AES.GCM.SealedBox(
            nonce: try AES.GCM.Nonce(data: bytes[headerSize + 32..<boxStart]),
            ciphertext: bytes[boxStart..<boxStart + 32], tag: bytes[boxStart + 32..<boxStart + 48])
        var opened = try AES.GCM.open(box, using: key, authenticating: bytes[0..<boxStart])
        // Copied into locked memory, and the decrypted bytes in ordinary memory overwritten.
        defer { opened.resetBytes(in: 0..<opened.count) }
        return opened.withUnsafeBytes { SecretBytes(copying: $0) }
    }

    private static func key(
        _ shared: SharedSecret, ephemeral: [UInt8], recovery: [UInt8], info: [UInt8], storeID: [UInt8]
    ) -> SymmetricKey {
        shared.hkdfDerivedSymmetricKey(
            using: SHA256.self, salt: ephemeral + recovery, sharedInfo: info + storeID, outputByteCount: 32)
    }
}

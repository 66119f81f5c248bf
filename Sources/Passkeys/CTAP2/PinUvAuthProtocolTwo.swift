package import Crypto
import CryptoExtras
import FoundationEssentials
import Secrets

/// PIN/UV auth protocol 2 (CTAP 2.1 §6.5.7): the platform and the authenticator agree on a
/// shared secret by ECDH on P-256, from which HKDF-SHA-256 makes an HMAC key and an AES-256 key;
/// PINs travel AES-256-CBC encrypted under it, and requests are authenticated by HMAC-SHA-256
/// with it, or with a pinUvAuthToken.
package enum PinUvAuthProtocolTwo {
    package static let number: Int64 = 2

    /// The shared secret with the platform whose COSE key is `platformKey`: HKDF(Z, "CTAP2 HMAC
    /// key") ‖ HKDF(Z, "CTAP2 AES key"), 64 bytes, both with a salt of 32 zero bytes.
    ///
    /// - Throws: ``CTAP2Status`` invalidParameter for a key that is not a P-256 COSE key on the curve.
    package static func sharedSecret(
        _ agreement: P256.KeyAgreement.PrivateKey, platformKey: CBOR
    ) throws(CTAP2Status) -> SymmetricKey {
        guard platformKey[1]?.int == 2, platformKey[-1]?.int == 1, let x = platformKey[-2]?.bytesValue,
            let y = platformKey[-3]?.bytesValue, x.count == 32, y.count == 32
        else { throw .invalidParameter("keyAgreement is not a P-256 COSE key") }
        let shared: SharedSecret
        do {
            let peer = try P256.KeyAgreement.PublicKey(x963Representation: [4] + x + y)
            shared = try agreement.sharedSecretFromKeyAgreement(with: peer)
        } catch {
            throw .invalidParameter("keyAgreement is not a point on P-256")
        }
        let salt = [UInt8](repeating: 0, count: 32)
        let hmacKey = shared.hkdfDerivedSymmetricKey(
            using: SHA256.self, salt: salt, sharedInfo: Array("CTAP2 HMAC key".utf8), outputByteCount: 32)
        let aesKey = shared.hkdfDerivedSymmetricKey(
            using: SHA256.self, salt: salt, sharedInfo: Array("CTAP2 AES key".utf8), outputByteCount: 32)
        // Joined in a buffer that erases itself: no copy of either key outlives this call.
        let joined = SecretBytes(count: 64) { target in
            hmacKey.withUnsafeBytes { target.baseAddress!.copyMemory(from: $0.baseAddress!, byteCount: 32) }
            aesKey.withUnsafeBytes { (target.baseAddress! + 32).copyMemory(from: $0.baseAddress!, byteCount: 32) }
        }
        return joined.withUnsafeBytes { SymmetricKey(data: $0) }
    }

    /// The authenticator's key-agreement key as a COSE_Key (alg -25, ECDH-ES+HKDF-256).
    package static func coseKey(_ agreement: P256.KeyAgreement.PrivateKey) -> CBOR {
        let point = Array(agreement.publicKey.x963Representation)
        return .map([
            .int(1): .int(2), .int(3): .int(-25), .int(-1): .int(1), .int(-2): .bytes(Array(point[1..<33])),
            .int(-3): .bytes(Array(point[33..<65])),
        ])
    }

    /// IV ‖ AES-256-CBC(plaintext), without padding: `plaintext` is a multiple of 16 bytes.
    package static func encrypt(_ plaintext: [UInt8], with shared: SymmetricKey) throws(CTAP2Status) -> [UInt8] {
        let iv = AES._CBC.IV()
        do {
            return Array(iv)
                + Array(try AES._CBC.encrypt(plaintext, using: aesKey(shared), iv: iv, noPadding: true))
        } catch {
            throw .other("AES-CBC failed: \(error)")
        }
    }

    package static func decrypt(_ ciphertext: [UInt8], with shared: SymmetricKey) throws(CTAP2Status) -> [UInt8] {
        guard ciphertext.count >= 32, ciphertext.count % 16 == 0 else {
            throw .invalidParameter("an encrypted PIN field is IV ‖ whole blocks")
        }
        do {
            let iv = try AES._CBC.IV(ivBytes: ciphertext.prefix(16))
            return Array(try AES._CBC.decrypt(ciphertext.dropFirst(16), using: aesKey(shared), iv: iv, noPadding: true))
        } catch {
            throw .invalidParameter("an encrypted PIN field does not decrypt")
        }
    }

    /// HMAC-SHA-256 of `message` under a shared secret's HMAC half, or under a whole 32-byte token.
    package static func authenticate(_ message: [UInt8], with key: SymmetricKey) -> [UInt8] {
        Array(HMAC<SHA256>.authenticationCode(for: message, using: hmacKey(key)))
    }

    /// Whether `signature` is the authentication of `message` (compared in constant time).
    package static func verify(_ signature: [UInt8], of message: [UInt8], with key: SymmetricKey) -> Bool {
        HMAC<SHA256>.isValidAuthenticationCode(signature, authenticating: message, using: hmacKey(key))
    }

    /// The HMAC half of a shared secret (its first 32 bytes), or a 32-byte token as it is;
    /// taken straight from the key's own storage, with no copy left behind.
    private static func hmacKey(_ key: SymmetricKey) -> SymmetricKey {
        guard key.bitCount == 512 else { return key }
        return key.withUnsafeBytes { SymmetricKey(data: UnsafeRawBufferPointer(rebasing: $0.prefix(32))) }
    }

    /// The AES half of a shared secret: its last 32 bytes.
    private static func aesKey(_ shared: SymmetricKey) -> SymmetricKey {
        shared.withUnsafeBytes { SymmetricKey(data: UnsafeRawBufferPointer(rebasing: $0.suffix(32))) }
    }
}

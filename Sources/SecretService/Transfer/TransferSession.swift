import CModularExponentiation
import Crypto
import CryptoExtras
import FoundationEssentials
import WireFormat

/// How secrets cross the bus in one client's session (the spec's "Session"): in the clear
/// (`plain`), or encrypted under a key agreed by Diffie-Hellman
/// (`dh-ietf1024-sha256-aes128-cbc-pkcs7`). Either way only the session's owner may use it.
struct TransferSession {
    enum Algorithm {
        case plain
        /// AES-128-CBC with PKCS#7 under the key HKDF-SHA256 derived from the DH shared secret.
        case diffieHellman(SymmetricKey)
    }

    static let plainName = "plain"
    static let diffieHellmanName = "dh-ietf1024-sha256-aes128-cbc-pkcs7"

    let path: String
    /// The unique name of the connection that opened it: no one else may use or close it.
    let owner: String
    let algorithm: Algorithm

    /// A secret for the client: (parameters, value). For DH, a fresh random IV and the ciphertext.
    func encrypt(_ secret: [UInt8]) throws(SecretServiceError) -> (parameters: [UInt8], value: [UInt8]) {
        switch algorithm {
        case .plain:
            return ([], secret)
        case .diffieHellman(let key):
            let iv = AES._CBC.IV()
            do {
                let ciphertext = try AES._CBC.encrypt(secret, using: key, iv: iv)
                return (Array(iv), Array(ciphertext))
            } catch {
                throw SecretServiceError(.failed, "The secret could not be encrypted for the session")
            }
        }
    }

    /// A secret from the client.
    ///
    /// - Throws: ``SecretServiceError`` `.invalidArgs` for a bad IV or padding.
    func decrypt(parameters: [UInt8], value: [UInt8]) throws(SecretServiceError) -> [UInt8] {
        switch algorithm {
        case .plain:
            return value
        case .diffieHellman(let key):
            do {
                let iv = try AES._CBC.IV(ivBytes: parameters)
                return Array(try AES._CBC.decrypt(value, using: key, iv: iv))
            } catch {
                throw SecretServiceError(
                    .invalidArgs, "The secret could not be decrypted with the session's key (wrong IV or padding)")
            }
        }
    }
}

/// The 1024-bit MODP group of RFC 2409 (Oakley group 2), generator 2, and the key agreement the
/// Secret Service specification builds on it.
enum DiffieHellmanGroup2 {
    static let prime: [UInt8] = [UInt8](
        hexString:
            "FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74020BBEA63B139B22514A08798E3404DD"
            + "EF9519B3CD3A431B302B0A6DF25F14374FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7ED"
            + "EE386BFB5A899FA5AE9F24117C4B1FE649286651ECE65381FFFFFFFFFFFFFFFF")!
    static let size = 128

    /// Agrees on an AES-128 key with a peer whose public value is `peerPublic`.
    ///
    /// - Returns: our public value (128 bytes, for the peer) and the session key.
    /// - Throws: ``SecretServiceError`` `.invalidArgs` for a public value outside 2...p-2.
    static func agree(
        clientPublic peerPublic: [UInt8]
    ) throws(SecretServiceError) -> (ourPublic: [UInt8], key: SymmetricKey) {
        var keyPair = try KeyPair()
        defer { keyPair.erase() }
        return (keyPair.publicValue, try keyPair.sessionKey(peerPublic: peerPublic))
    }

    /// One side's private exponent and public value: the daemon's for a client, or an import's
    /// for the provider it reads.
    struct KeyPair {
        // 256 random bits: twice the group's strength (about 80 bits for 1024-bit MODP), the
        // usual short-exponent rule (RFC 3526, section 8), and a quarter of the work of a full one.
        private var privateExponent = [UInt8](repeating: 0, count: 32)
        let publicValue: [UInt8]

        init() throws(SecretServiceError) {
            var generator = SystemRandomNumberGenerator()
            for index in privateExponent.indices { privateExponent[index] = generator.next() }
            publicValue = try DiffieHellmanGroup2.power([2], privateExponent)
        }

        /// The AES-128 key: HKDF-SHA256 (no salt, no info) of the shared secret, left-padded to
        /// the prime's 128 bytes, as libsecret, secretstorage and oo7 expect.
        func sessionKey(peerPublic: [UInt8]) throws(SecretServiceError) -> SymmetricKey {
            guard DiffieHellmanGroup2.isAcceptable(peerPublic) else {
                throw SecretServiceError(.invalidArgs, "The peer's Diffie-Hellman public value is out of range")
            }
            var shared = try DiffieHellmanGroup2.power(peerPublic, privateExponent)
            defer { for index in shared.indices { shared[index] = 0 } }
            return HKDF<SHA256>.deriveKey(
                inputKeyMaterial: SymmetricKey(data: shared), salt: [UInt8](), info: [UInt8](), outputByteCount: 16)
        }

        mutating func erase() {
            for index in privateExponent.indices { privateExponent[index] = 0 }
        }
    }

    fileprivate static func power(_ base: [UInt8], _ exponent: [UInt8]) throws(SecretServiceError) -> [UInt8] {
        var result = [UInt8](repeating: 0, count: size)
        let ok = result.withUnsafeMutableBufferPointer { output in
            tpmkeychain_mod_exp(base, base.count, exponent, exponent.count, prime, prime.count, output.baseAddress)
        }
        guard ok == 1 else { throw SecretServiceError(.failed, "Diffie-Hellman failed") }
        return result
    }

    /// 1 < y < p - 1, compared as big-endian numbers, in at most the prime's 128 bytes (no
    /// padding of leading zeros beyond it). In a safe-prime group the only elements of small order
    /// are 1 and p - 1, so this range leaves no small subgroup to confine the key to.
    fileprivate static func isAcceptable(_ value: [UInt8]) -> Bool {
        guard value.count <= size else { return false }
        let trimmed = Array(value.drop { $0 == 0 })
        guard trimmed.count <= size, !(trimmed.count == 1 && trimmed[0] <= 1), !trimmed.isEmpty else { return false }
        guard trimmed.count == size else { return true }
        var limit = prime
        limit[size - 1] -= 1 // p - 1 (p is odd)
        return trimmed.lexicographicallyPrecedes(limit)
    }
}

import Crypto
import Foundation
import Secrets

/// The NIST curves SecKey's EC keys use (kSecAttrKeyTypeECSECPrimeRandom), over swift-crypto.
/// Keys travel as Apple's external representations: X9.63 public (0x04 ‖ X ‖ Y) and private
/// (0x04 ‖ X ‖ Y ‖ K).
enum EllipticCurve: Sendable, Hashable {
    case p256, p384, p521

    init?(bits: Int) {
        switch bits {
        case 256: self = .p256
        case 384: self = .p384
        case 521: self = .p521
        default: return nil
        }
    }

    /// The curve whose X9.63 public key (or private key, `private`) has `count` bytes.
    init?(representationCount count: Int, private: Bool) {
        for curve in [EllipticCurve.p256, .p384, .p521]
        where count == 1 + 2 * curve.coordinateBytes + (`private` ? curve.coordinateBytes : 0) {
            self = curve
            return
        }
        return nil
    }

    var bits: Int {
        switch self {
        case .p256: 256
        case .p384: 384
        case .p521: 521
        }
    }

    var coordinateBytes: Int { (bits + 7) / 8 }
    var publicKeyBytes: Int { 1 + 2 * coordinateBytes }

    /// A new private key, X9.63.
    func generate() -> [UInt8] {
        switch self {
        case .p256: Array(P256.Signing.PrivateKey().x963Representation)
        case .p384: Array(P384.Signing.PrivateKey().x963Representation)
        case .p521: Array(P521.Signing.PrivateKey().x963Representation)
        }
    }

    /// Checks a private key (X9.63) and returns its public key.
    func publicKey(ofPrivate key: [UInt8]) throws -> [UInt8] {
        switch self {
        case .p256: Array(try P256.Signing.PrivateKey(x963Representation: key).publicKey.x963Representation)
        case .p384: Array(try P384.Signing.PrivateKey(x963Representation: key).publicKey.x963Representation)
        case .p521: Array(try P521.Signing.PrivateKey(x963Representation: key).publicKey.x963Representation)
        }
    }

    /// Checks that a public key (X9.63) is a point of the curve.
    func validatePublic(_ key: [UInt8]) throws {
        switch self {
        case .p256: _ = try P256.Signing.PublicKey(x963Representation: key)
        case .p384: _ = try P384.Signing.PublicKey(x963Representation: key)
        case .p521: _ = try P521.Signing.PublicKey(x963Representation: key)
        }
    }

    /// An ECDSA signature (X9.62 DER) of `digest`.
    func sign(digest: [UInt8], privateKey: [UInt8]) throws -> [UInt8] {
        let digest = RawDigest(digest)
        switch self {
        case .p256:
            return Array(
                try P256.Signing.PrivateKey(x963Representation: privateKey).signature(for: digest).derRepresentation)
        case .p384:
            return Array(
                try P384.Signing.PrivateKey(x963Representation: privateKey).signature(for: digest).derRepresentation)
        case .p521:
            return Array(
                try P521.Signing.PrivateKey(x963Representation: privateKey).signature(for: digest).derRepresentation)
        }
    }

    /// Whether `signature` (X9.62 DER) is the public key's signature of `digest`.
    func verify(signature: [UInt8], digest: [UInt8], publicKey: [UInt8]) throws -> Bool {
        let digest = RawDigest(digest)
        switch self {
        case .p256:
            return try P256.Signing.PublicKey(x963Representation: publicKey).isValidSignature(
                try P256.Signing.ECDSASignature(derRepresentation: signature), for: digest)
        case .p384:
            return try P384.Signing.PublicKey(x963Representation: publicKey).isValidSignature(
                try P384.Signing.ECDSASignature(derRepresentation: signature), for: digest)
        case .p521:
            return try P521.Signing.PublicKey(x963Representation: publicKey).isValidSignature(
                try P521.Signing.ECDSASignature(derRepresentation: signature), for: digest)
        }
    }

    /// The ECDH shared secret: the x-coordinate of the shared point (the cofactor is 1 on these
    /// curves, so the standard and cofactor variants agree). Copied from swift-crypto's secret
    /// straight into memory that is zeroized when released, never through a plain array.
    func sharedSecret(privateKey: [UInt8], peer: [UInt8]) throws -> SecretBytes {
        let shared: SharedSecret
        switch self {
        case .p256:
            shared = try P256.KeyAgreement.PrivateKey(x963Representation: privateKey).sharedSecretFromKeyAgreement(
                with: try P256.KeyAgreement.PublicKey(x963Representation: peer))
        case .p384:
            shared = try P384.KeyAgreement.PrivateKey(x963Representation: privateKey).sharedSecretFromKeyAgreement(
                with: try P384.KeyAgreement.PublicKey(x963Representation: peer))
        case .p521:
            shared = try P521.KeyAgreement.PrivateKey(x963Representation: privateKey).sharedSecretFromKeyAgreement(
                with: try P521.KeyAgreement.PublicKey(x963Representation: peer))
        }
        return shared.withUnsafeBytes { SecretBytes(copying: $0) }
    }

    /// An ECDSA signature r ‖ s (as a TPM returns it) in X9.62 DER.
    static func derSignature(raw: [UInt8]) throws -> [UInt8] {
        Array(try P256.Signing.ECDSASignature(rawRepresentation: raw).derRepresentation)
    }
}

/// A digest the caller computed (SecKey's digest algorithms), handed to swift-crypto's ECDSA,
/// which signs whatever digest bytes it is given.
struct RawDigest: Digest {
    static let byteCount = 0 // not consulted by ECDSA; the bytes carry their own length
    let bytes: [UInt8]

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    func makeIterator() -> Array<UInt8>.Iterator { bytes.makeIterator() }
    func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try bytes.withUnsafeBytes(body)
    }
    var description: String { "RawDigest(\(bytes.count) bytes)" }
}

/// ANSI X9.63's KDF (SEC 1 3.6.1): H(Z ‖ counter ‖ sharedInfo) for counter
/// 1, 2, … as a 32-bit big-endian integer, concatenated and cut to `count` bytes. For a shared
/// secret computed in the TPM, which swift-crypto's SharedSecret cannot be made from.
enum X963KDF {
    static func derive<H: HashFunction>(
        _: H.Type, _ secret: UnsafeRawBufferPointer, sharedInfo: [UInt8], count: Int
    ) -> [UInt8] {
        var output: [UInt8] = []
        var counter: UInt32 = 1
        while output.count < count {
            var hash = H()
            hash.update(bufferPointer: secret)
            withUnsafeBytes(of: counter.bigEndian) { hash.update(bufferPointer: $0) }
            hash.update(data: sharedInfo)
            output += hash.finalize()
            counter += 1
        }
        return Array(output.prefix(count))
    }
}

import Crypto
import CryptoExtras
import Foundation
import KeychainVocabulary
import TPMKeychain

/// What a SecKey is: a software key (EC or RSA, private or public) over swift-crypto, or a
/// private key that lives in the TPM, stored as a key item.
enum KeyMaterial: Sendable {
    /// An EC key: the private key (X9.63, nil for a public key) and the public key (X9.63).
    case ec(EllipticCurve, privateKey: [UInt8]?, publicKey: [UInt8])
    /// An RSA key: the private key (nil for a public key) and the public key.
    case rsa(privateKey: _RSA.Signing.PrivateKey?, publicKey: _RSA.Signing.PublicKey)
    /// A P-256 private key in the TPM (kSecAttrTokenIDSecureEnclave).
    case tpm(TPMKeyItem)

    var isPrivate: Bool {
        switch self {
        case .ec(_, let privateKey, _): privateKey != nil
        case .rsa(let privateKey, _): privateKey != nil
        case .tpm: true
        }
    }

    var keyType: String {
        switch self {
        case .ec, .tpm: "73"
        case .rsa: "42"
        }
    }

    var bits: Int {
        switch self {
        case .ec(let curve, _, _): curve.bits
        case .rsa(_, let publicKey): publicKey.keySizeInBits
        case .tpm: 256
        }
    }

    /// The public key's external representation: X9.63 for EC, PKCS#1 for RSA.
    var publicKeyBytes: [UInt8] {
        switch self {
        case .ec(_, _, let publicKey): publicKey
        case .rsa(_, let publicKey): Array(publicKey.pkcs1DERRepresentation)
        case .tpm(let item): item.publicKey
        }
    }

    var publicMaterial: KeyMaterial {
        switch self {
        case .ec(let curve, _, let publicKey): .ec(curve, privateKey: nil, publicKey: publicKey)
        case .rsa(_, let publicKey): .rsa(privateKey: nil, publicKey: publicKey)
        case .tpm(let item): .ec(.p256, privateKey: nil, publicKey: item.publicKey)
        }
    }

    /// Apple's kSecAttrApplicationLabel for an asymmetric key: the SHA-1 of its public key's
    /// external representation.
    var applicationLabel: [UInt8] {
        Array(Insecure.SHA1.hash(data: publicKeyBytes))
    }

    /// The external representation SecKeyCopyExternalRepresentation returns; nil for a TPM key.
    var externalRepresentation: [UInt8]? {
        switch self {
        case .ec(_, let privateKey, let publicKey): privateKey ?? publicKey
        case .rsa(let privateKey, let publicKey):
            Array(privateKey?.derRepresentation ?? publicKey.pkcs1DERRepresentation)
        case .tpm: nil
        }
    }

    /// A key from an external representation (SecKeyCreateWithData).
    static func decode(_ bytes: [UInt8], type: String, isPrivate: Bool) throws(SecStatus) -> KeyMaterial {
        switch type {
        case "73":
            guard let curve = EllipticCurve(representationCount: bytes.count, private: isPrivate) else {
                throw SecStatus(errSecParam)
            }
            do {
                if isPrivate {
                    return .ec(curve, privateKey: bytes, publicKey: try curve.publicKey(ofPrivate: bytes))
                }
                try curve.validatePublic(bytes)
                return .ec(curve, privateKey: nil, publicKey: bytes)
            } catch {
                throw SecStatus(errSecParam)
            }
        case "42":
            do {
                if isPrivate {
                    let key = try _RSA.Signing.PrivateKey(derRepresentation: bytes)
                    return .rsa(privateKey: key, publicKey: key.publicKey)
                }
                return .rsa(privateKey: nil, publicKey: try _RSA.Signing.PublicKey(derRepresentation: bytes))
            } catch {
                throw SecStatus(errSecParam)
            }
        default:
            throw SecStatus(errSecParam)
        }
    }
}

/// A TPM key stored as a key item: where it is, its public key and usage, and the context that
/// authenticates its uses (kSecUseAuthenticationContext at creation or in the query that found it).
struct TPMKeyItem: Sendable {
    let location: KeychainLocation
    let reference: [UInt8]
    let publicKey: [UInt8]
    let context: AuthenticationContext?
    let prompt: String?
}

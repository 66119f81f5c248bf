import Crypto
import CryptoExtras
import Foundation
import SwiftASN1
import X509

/// A certificate's DER bytes and what SecCertificate and certificate items read from them,
/// parsed once by swift-certificates.
struct ParsedCertificate: Sendable {
    let der: [UInt8]
    let subject: [UInt8]
    let issuer: [UInt8]
    let serialNumber: [UInt8]
    let subjectKeyIdentifier: [UInt8]?
    let commonName: String?
    let subjectSummary: String
    /// The public key (nil for an algorithm SecKey does not have).
    let publicKey: KeyMaterial?
    /// Apple's kSecAttrPublicKeyHash: the SHA-1 of the public key's canonical bytes (X9.63 for EC,
    /// PKCS#1 for RSA), which is a private key item's application label.
    let publicKeyHash: [UInt8]

    init(der: [UInt8]) throws {
        let certificate = try Certificate(derEncoded: der)
        self.der = der
        subject = try Self.encoded(certificate.subject)
        issuer = try Self.encoded(certificate.issuer)
        serialNumber = Array(certificate.serialNumber.bytes)
        subjectKeyIdentifier = try certificate.extensions.subjectKeyIdentifier.map { Array($0.keyIdentifier) }
        let canonical = Array(certificate.publicKey.subjectPublicKeyInfoBytes)
        publicKeyHash = Array(Insecure.SHA1.hash(data: canonical))
        if P256.Signing.PublicKey(certificate.publicKey) != nil {
            publicKey = .ec(.p256, privateKey: nil, publicKey: canonical)
        } else if P384.Signing.PublicKey(certificate.publicKey) != nil {
            publicKey = .ec(.p384, privateKey: nil, publicKey: canonical)
        } else if P521.Signing.PublicKey(certificate.publicKey) != nil {
            publicKey = .ec(.p521, privateKey: nil, publicKey: canonical)
        } else if let rsa = _RSA.Signing.PublicKey(certificate.publicKey) {
            publicKey = .rsa(privateKey: nil, publicKey: rsa)
        } else {
            publicKey = nil
        }
        func first(_ type: ASN1ObjectIdentifier) -> String? {
            for name in certificate.subject {
                for attribute in name where attribute.type == type { return String(describing: attribute.value) }
            }
            return nil
        }
        commonName = first(.RDNAttributeType.commonName)
        subjectSummary =
            commonName ?? first(.RDNAttributeType.emailAddress) ?? first(.RDNAttributeType.organizationalUnitName)
            ?? first(.RDNAttributeType.organizationName) ?? String(describing: certificate.subject)
    }

    private static func encoded(_ name: DistinguishedName) throws -> [UInt8] {
        var serializer = DER.Serializer()
        try serializer.serialize(name)
        return serializer.serializedBytes
    }
}

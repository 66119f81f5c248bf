import Crypto
import Foundation
import SecurityCompat
import SwiftASN1
import TPMKeychain
import Testing
import X509

/// Certificates and identities: a device certificate a CA issued for a key in the TPM, stored,
/// found, paired with its private key, and deleted with it. In SecItemTests' serialized suite.
extension SecItemTests {
    @Test(
        "A certificate for a TPM key: SecCertificate reads it, its item gets Apple's derived attributes, and the identity pairs it with the TPM key, which signs"
    )
    func certificatesAndIdentities() throws {
        let environment = try CompatEnvironment()
        let deviceKey = try AppleKeyExamples.makeAndStoreKey(name: "com.example.keys.identity")
        let devicePublic = try #require(SecKeyCopyPublicKey(deviceKey))
        var error: Unmanaged<CFError>?
        let point = try #require(SecKeyCopyExternalRepresentation(devicePublic, &error) as Data?)
        let authority = P256.Signing.PrivateKey()
        let deviceDER = try Self.certificate(
            for: try P256.Signing.PublicKey(x963Representation: point), commonName: "device-42", serial: [0x12, 0x34],
            issuer: authority)
        let authorityDER = try Self.certificate(
            for: authority.publicKey, commonName: "Example CA", serial: [0x01], issuer: authority)

        let certificate = try #require(SecCertificateCreateWithData(nil, deviceDER as CFData))
        #expect(SecCertificateCopyData(certificate) as Data == deviceDER)
        #expect(SecCertificateCopySubjectSummary(certificate) as String? == "device-42")
        var commonName: CFString?
        #expect(SecCertificateCopyCommonName(certificate, &commonName) == errSecSuccess && commonName == "device-42")
        #expect(SecCertificateCopySerialNumberData(certificate, nil) as Data? == Data([0x12, 0x34]))
        #expect(SecCertificateCopyKey(certificate) == devicePublic)
        #expect(SecCertificateCreateWithData(nil, Data("not a certificate".utf8) as CFData) == nil)

        #expect(
            SecItemAdd(
                [kSecClass as String: kSecClassCertificate, kSecValueRef as String: certificate] as CFDictionary, nil)
                == errSecSuccess)
        #expect(
            SecItemAdd(
                [kSecClass as String: kSecClassCertificate, kSecValueData as String: deviceDER] as CFDictionary, nil)
                == errSecDuplicateItem)
        #expect(
            SecItemAdd(
                [kSecClass as String: kSecClassCertificate, kSecValueData as String: authorityDER] as CFDictionary, nil)
                == errSecSuccess)
        #expect(
            SecItemAdd(
                [kSecClass as String: kSecClassCertificate, kSecValueData as String: Data([1, 2, 3])] as CFDictionary,
                nil) == errSecParam)

        var result: AnyObject?
        #expect(
            SecItemCopyMatching(
                [
                    kSecClass as String: kSecClassCertificate, kSecAttrLabel as String: "device-42",
                    kSecReturnAttributes as String: true, kSecReturnRef as String: true,
                ] as CFDictionary, &result) == errSecSuccess)
        let attributes = try #require(result as? [String: Any])
        #expect((attributes[kSecValueRef as String] as? SecCertificate) == certificate)
        #expect(attributes[kSecAttrSerialNumber as String] as? Data == Data([0x12, 0x34]))
        #expect(attributes[kSecAttrCertificateType as String] as? Int == 3)
        // The public key hash is the private key's application label: how identities pair.
        let keyAttributes = try #require(SecKeyCopyAttributes(deviceKey) as? [String: Any])
        #expect(
            attributes[kSecAttrPublicKeyHash as String] as? Data == keyAttributes[kSecAttrApplicationLabel as String]
                as? Data)
        #expect(attributes[kSecAttrSubjectKeyID as String] as? Data == Data([9, 9, 9]))

        // Identities: only the certificate whose private key is here.
        result = nil
        #expect(
            SecItemCopyMatching(
                [
                    kSecClass as String: kSecClassIdentity, kSecReturnRef as String: true,
                    kSecMatchLimit as String: kSecMatchLimitAll,
                ]
                    as CFDictionary, &result) == errSecSuccess)
        let identities = try #require(result as? [SecIdentity])
        #expect(identities.count == 1)
        let identity = try #require(identities.first)
        var identityCertificate: SecCertificate?
        var identityKey: SecKey?
        #expect(
            SecIdentityCopyCertificate(identity, &identityCertificate) == errSecSuccess
                && identityCertificate == certificate)
        #expect(SecIdentityCopyPrivateKey(identity, &identityKey) == errSecSuccess)
        let message = Data("signed by the identity".utf8)
        let signature = try AppleKeyExamples.sign(message, with: try #require(identityKey))
        #expect(AppleKeyExamples.verify(signature, of: message, with: try #require(SecCertificateCopyKey(certificate))))

        var made: SecIdentity?
        #expect(SecIdentityCreateWithCertificate(nil, certificate, &made) == errSecSuccess && made == identity)
        let authorityCertificate = try #require(SecCertificateCreateWithData(nil, authorityDER as CFData))
        #expect(SecIdentityCreateWithCertificate(nil, authorityCertificate, &made) == errSecItemNotFound)

        // Deleting the identity deletes its certificate and its key.
        #expect(SecItemDelete([kSecClass as String: kSecClassIdentity] as CFDictionary) == errSecSuccess)
        #expect(
            SecItemCopyMatching([kSecClass as String: kSecClassIdentity] as CFDictionary, nil) == errSecItemNotFound)
        #expect(AppleKeyExamples.loadKey(name: "com.example.keys.identity") == nil)
        #expect(
            SecItemCopyMatching(
                [kSecClass as String: kSecClassCertificate, kSecMatchLimit as String: kSecMatchLimitAll]
                    as CFDictionary,
                nil) == errSecSuccess) // the CA's certificate stays
        _ = environment
    }

    private static func certificate(
        for publicKey: P256.Signing.PublicKey, commonName: String, serial: [UInt8], issuer: P256.Signing.PrivateKey
    ) throws -> Data {
        let subject = try DistinguishedName { CommonName(commonName) }
        let issuerName = try DistinguishedName {
            CommonName(issuer.publicKey.rawRepresentation == publicKey.rawRepresentation ? commonName : "Example CA")
        }
        let certificate = try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(bytes: serial), publicKey: .init(publicKey),
            notValidBefore: Date(timeIntervalSinceNow: -3600), notValidAfter: Date(timeIntervalSinceNow: 86400),
            issuer: issuerName, subject: subject, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions { SubjectKeyIdentifier(keyIdentifier: [9, 9, 9]) },
            issuerPrivateKey: .init(issuer))
        var serializer = DER.Serializer()
        try serializer.serialize(certificate)
        return Data(serializer.serializedBytes)
    }
}

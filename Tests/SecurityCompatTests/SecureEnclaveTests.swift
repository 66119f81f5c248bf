import Crypto
import Foundation
import LocalAuthenticationCompat
import SecureEnclaveCompat
import SecurityCompat
import Testing

/// CryptoKit's SecureEnclave code as Apple documents it, with `import CryptoKit` replaced by
/// `import Crypto` and `import SecureEnclaveCompat`; swift-crypto checks what the TPM made.
/// In SecItemTests' serialized suite: the keychain configuration is process-wide.
extension SecItemTests {
    @Test(
        "SecureEnclave.P256.Signing: a key made in the TPM signs; swift-crypto verifies; its dataRepresentation brings it back; it never signs once its item is deleted"
    )
    func secureEnclaveSigning() throws {
        let environment = try CompatEnvironment()
        #expect(SecureEnclave.isAvailable)
        let privateKey = try SecureEnclave.P256.Signing.PrivateKey()
        let data = Data("signed in the enclave".utf8)
        let signature = try privateKey.signature(for: data)
        #expect(privateKey.publicKey.isValidSignature(signature, for: data))
        #expect(!privateKey.publicKey.isValidSignature(signature, for: Data("other".utf8)))
        let digestSignature = try privateKey.signature(for: SHA256.hash(data: data))
        #expect(privateKey.publicKey.isValidSignature(digestSignature, for: data))

        let restored = try SecureEnclave.P256.Signing.PrivateKey(dataRepresentation: privateKey.dataRepresentation)
        #expect(restored.publicKey.rawRepresentation == privateKey.publicKey.rawRepresentation)
        #expect(privateKey.publicKey.isValidSignature(try restored.signature(for: data), for: data))
        // The data names the key; it holds no key material.
        #expect(privateKey.dataRepresentation.count < 64)

        #expect(
            SecItemDelete(
                [kSecClass as String: kSecClassKey, kSecAttrTokenID as String: kSecAttrTokenIDSecureEnclave]
                    as CFDictionary) == errSecSuccess)
        #expect(throws: (any Error).self) { _ = try restored.signature(for: data) }
        #expect(throws: (any Error).self) {
            _ = try SecureEnclave.P256.Signing.PrivateKey(dataRepresentation: privateKey.dataRepresentation)
        }
        _ = environment
    }

    @Test(
        "SecureEnclave.P256.KeyAgreement under biometry: the TPM key and a swift-crypto key derive the same symmetric key; biometry is asked once per context window"
    )
    func secureEnclaveKeyAgreement() throws {
        let environment = try CompatEnvironment()
        let accessControl = SecAccessControlCreateWithFlags(
            nil, kSecAttrAccessibleWhenUnlockedThisDeviceOnly, [.privateKeyUsage, .biometryAny], nil)!
        let authContext = LAContext()
        authContext.touchIDAuthenticationAllowableReuseDuration = 60
        let deviceKey = try SecureEnclave.P256.KeyAgreement.PrivateKey(
            accessControl: accessControl, authenticationContext: authContext)
        let peer = P256.KeyAgreement.PrivateKey()
        let salt = Data("salt".utf8)
        let info = Data("TPMKeychain tests".utf8)
        let ours = try deviceKey.sharedSecretFromKeyAgreement(with: peer.publicKey)
            .hkdfDerivedSymmetricKey(using: SHA256.self, salt: salt, sharedInfo: info, outputByteCount: 32)
        let theirs = try peer.sharedSecretFromKeyAgreement(with: deviceKey.publicKey)
            .hkdfDerivedSymmetricKey(using: SHA256.self, salt: salt, sharedInfo: info, outputByteCount: 32)
        #expect(ours == theirs)
        let x963Ours = try deviceKey.sharedSecretFromKeyAgreement(with: peer.publicKey)
            .x963DerivedSymmetricKey(using: SHA256.self, sharedInfo: info, outputByteCount: 48)
        let x963Theirs = try peer.sharedSecretFromKeyAgreement(with: deviceKey.publicKey)
            .x963DerivedSymmetricKey(using: SHA256.self, sharedInfo: info, outputByteCount: 48)
        #expect(x963Ours == x963Theirs)
        #expect(environment.face.attempts == 1)

        // A cancelled prompt refuses the key (a new context has no window).
        environment.face.nextOutcomes = [.cancel]
        let other = try SecureEnclave.P256.KeyAgreement.PrivateKey(
            dataRepresentation: deviceKey.dataRepresentation, authenticationContext: LAContext())
        #expect(throws: (any Error).self) { _ = try other.sharedSecretFromKeyAgreement(with: peer.publicKey) }
    }
}

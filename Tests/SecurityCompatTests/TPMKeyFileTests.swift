import Crypto
import Foundation
import SecurityCompat
import TPMKeychain
import TPMKeychainTesting
import Testing

/// kSecAttrTPMKeyFile and SecKeyCopyTPMKeyFile, the Linux addition to SecKey. In SecItemTests'
/// serialized suite: SecItem's configuration is process-wide.
extension SecItemTests {
    @Test(
        "A TPM key made with kSecAttrTPMKeyFile is written as a TSS2 key file that openssl's tpm2 provider signs with, while the keychain's own copy keeps its access control; other keys are refused with errSecParam"
    )
    func tpmKeyFiles() throws {
        let environment = try CompatEnvironment()
        let access = try #require(
            SecAccessControlCreateWithFlags(
                nil, kSecAttrAccessibleWhenUnlockedThisDeviceOnly, [.privateKeyUsage, .biometryCurrentSet], nil))
        let attributes: [String: Any] = [
            kSecAttrKeyType as String: kSecAttrKeyTypeECSECPrimeRandom, kSecAttrKeySizeInBits as String: 256,
            kSecAttrTokenID as String: kSecAttrTokenIDSecureEnclave,
            kSecPrivateKeyAttrs as String: [
                kSecAttrIsPermanent as String: true, kSecAttrApplicationTag as String: Data("filed".utf8),
                kSecAttrAccessControl as String: access, kSecAttrTPMKeyFile as String: true,
            ],
        ]
        var error: Unmanaged<CFError>?
        let key = try #require(
            SecKeyCreateRandomKey(attributes as CFDictionary, &error), "\(String(describing: error))")
        let publicKey = try P256.Signing.PublicKey(
            x963Representation: try externalRepresentation(try #require(SecKeyCopyPublicKey(key))))

        // The keychain's copy asks for the enrolled face, then signs in the TPM.
        let before = environment.face.attempts
        let message = Data("signed by a key other tools may use".utf8)
        let signature = try #require(
            SecKeyCreateSignature(key, .ecdsaSignatureMessageX962SHA256, message as CFData, &error))
        #expect(environment.face.attempts > before)
        #expect(
            publicKey.isValidSignature(
                try P256.Signing.ECDSASignature(derRepresentation: Data(referencing: signature)), for: message))

        let pem = try #require(SecKeyCopyTPMKeyFile(key, &error)) as String
        #expect(pem.hasPrefix("-----BEGIN TSS2 PRIVATE KEY-----"))
        let file = environment.directory + "/filed.pem"
        try Data(pem.utf8).write(to: URL(fileURLWithPath: file))
        let opensslSignature = try SystemTool.output(
            "/usr/bin/openssl",
            [
                "dgst", "-sha256", "-provider", "tpm2", "-provider", "default", "-propquery", "?provider=tpm2", "-sign",
                file,
            ], environment: ["TPM2OPENSSL_TCTI": environment.simulator.tcti], input: message)
        #expect(
            publicKey.isValidSignature(
                try P256.Signing.ECDSASignature(derRepresentation: opensslSignature), for: message))

        // A keychain-only TPM key, and a software key, have no key file.
        let keychainOnly = try AppleKeyExamples.makeAndStoreKey(name: "keychain-only")
        error = nil
        #expect(SecKeyCopyTPMKeyFile(keychainOnly, &error) == nil)
        #expect(error?.takeRetainedValue().code == Int(errSecParam))
        let software = try #require(
            SecKeyCreateRandomKey(
                [kSecAttrKeyType: kSecAttrKeyTypeECSECPrimeRandom, kSecAttrKeySizeInBits: 256] as CFDictionary, &error))
        error = nil
        #expect(SecKeyCopyTPMKeyFile(software, &error) == nil)
        #expect(error?.takeRetainedValue().code == Int(errSecParam))
    }
}

// Apple's documented key code ("Storing keys in the Secure Enclave", "Signing and verifying",
// "Using keys for encryption", "Using keys for key exchange"), written as those articles show it
// with only the imports changed (CryptoKit's `Security` import becomes SecurityCompat) and `as
// Error` spelled `as any Error` for this package's ExistentialAny setting.
import Foundation
import SecurityCompat

enum AppleKeyExamples {
    /// "Storing keys in the Secure Enclave": a permanent P-256 key in the enclave (here the TPM).
    static func makeAndStoreKey(name: String, requiresBiometry: Bool = false) throws -> SecKey {
        let flags: SecAccessControlCreateFlags =
            requiresBiometry ? [.privateKeyUsage, .biometryCurrentSet] : .privateKeyUsage
        let access = SecAccessControlCreateWithFlags(
            kCFAllocatorDefault, kSecAttrAccessibleWhenUnlockedThisDeviceOnly, flags, nil)!
        let tag = name.data(using: .utf8)!
        let attributes: [String: Any] = [
            kSecAttrKeyType as String: kSecAttrKeyTypeEC,
            kSecAttrKeySizeInBits as String: 256,
            kSecAttrTokenID as String: kSecAttrTokenIDSecureEnclave,
            kSecPrivateKeyAttrs as String: [
                kSecAttrIsPermanent as String: true,
                kSecAttrApplicationTag as String: tag,
                kSecAttrAccessControl as String: access,
            ],
        ]
        var error: Unmanaged<CFError>?
        guard let privateKey = SecKeyCreateRandomKey(attributes as CFDictionary, &error) else {
            throw error!.takeRetainedValue() as any Error
        }
        return privateKey
    }

    /// "Storing keys in the Secure Enclave": finding the key again by its tag.
    static func loadKey(name: String, context: AnyObject? = nil) -> SecKey? {
        let tag = name.data(using: .utf8)!
        var query: [String: Any] = [
            kSecClass as String: kSecClassKey,
            kSecAttrApplicationTag as String: tag,
            kSecAttrKeyType as String: kSecAttrKeyTypeEC,
            kSecReturnRef as String: true,
        ]
        if let context { query[kSecUseAuthenticationContext as String] = context }
        var item: CFTypeRef?
        let status = SecItemCopyMatching(query as CFDictionary, &item)
        guard status == errSecSuccess else { return nil }
        return (item as! SecKey)
    }

    /// "Signing and verifying".
    static func sign(_ data: Data, with privateKey: SecKey) throws -> Data {
        let algorithm: SecKeyAlgorithm = .ecdsaSignatureMessageX962SHA256
        guard SecKeyIsAlgorithmSupported(privateKey, .sign, algorithm) else {
            throw NSError(domain: NSOSStatusErrorDomain, code: Int(errSecParam))
        }
        var error: Unmanaged<CFError>?
        guard let signature = SecKeyCreateSignature(privateKey, algorithm, data as CFData, &error) as Data? else {
            throw error!.takeRetainedValue() as any Error
        }
        return signature
    }

    static func verify(_ signature: Data, of data: Data, with publicKey: SecKey) -> Bool {
        var error: Unmanaged<CFError>?
        return SecKeyVerifySignature(
            publicKey, .ecdsaSignatureMessageX962SHA256, data as CFData, signature as CFData, &error)
    }

    /// "Using keys for encryption".
    static func encrypt(_ plainText: Data, to publicKey: SecKey) throws -> Data {
        let algorithm: SecKeyAlgorithm = .eciesEncryptionCofactorVariableIVX963SHA256AESGCM
        guard SecKeyIsAlgorithmSupported(publicKey, .encrypt, algorithm) else {
            throw NSError(domain: NSOSStatusErrorDomain, code: Int(errSecParam))
        }
        var error: Unmanaged<CFError>?
        guard let cipherText = SecKeyCreateEncryptedData(publicKey, algorithm, plainText as CFData, &error) as Data?
        else {
            throw error!.takeRetainedValue() as any Error
        }
        return cipherText
    }

    static func decrypt(_ cipherText: Data, with privateKey: SecKey) throws -> Data {
        let algorithm: SecKeyAlgorithm = .eciesEncryptionCofactorVariableIVX963SHA256AESGCM
        guard SecKeyIsAlgorithmSupported(privateKey, .decrypt, algorithm) else {
            throw NSError(domain: NSOSStatusErrorDomain, code: Int(errSecParam))
        }
        var error: Unmanaged<CFError>?
        guard let clearText = SecKeyCreateDecryptedData(privateKey, algorithm, cipherText as CFData, &error) as Data?
        else {
            throw error!.takeRetainedValue() as any Error
        }
        return clearText
    }

    /// "Using keys for key exchange": ECDH with the X9.63 KDF.
    static func sharedKey(_ privateKey: SecKey, _ publicKey: SecKey, sharedInfo: Data) throws -> Data {
        let parameters: [String: Any] = [
            SecKeyKeyExchangeParameter.requestedSize.rawValue as String: 32,
            SecKeyKeyExchangeParameter.sharedInfo.rawValue as String: sharedInfo,
        ]
        var error: Unmanaged<CFError>?
        guard
            let shared = SecKeyCopyKeyExchangeResult(
                privateKey, .ecdhKeyExchangeStandardX963SHA256, publicKey, parameters as CFDictionary, &error)
                as Data?
        else {
            throw error!.takeRetainedValue() as any Error
        }
        return shared
    }

    /// Deleting a key by its tag.
    static func deleteKey(name: String) -> OSStatus {
        SecItemDelete(
            [kSecClass as String: kSecClassKey, kSecAttrApplicationTag as String: name.data(using: .utf8)!]
                as CFDictionary)
    }
}

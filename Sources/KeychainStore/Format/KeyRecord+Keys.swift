import Crypto
import KeychainVocabulary
import TPM
import WireFormat

// The keys of a key record: the record key from its secret, the protectors that hold that secret.
extension KeyRecord {
    static let recordKeyInfo = Array("TPMKeychain record key".utf8)
    static let passcodeProtectorInfo = Array("TPMKeychain passcode protector".utf8)
    static let combinedInfo = Array("TPMKeychain record secret (and)".utf8)
    static let protectedSecretInfo = Array("TPMKeychain v2 protected secret".utf8)

    /// The record's private key from its secret S.
    ///
    /// - Throws: ``KeychainError`` `.tampered` if the derived bytes are not a key (X25519 takes any 32
    ///   bytes, clamping them, so this does not happen).
    static func privateKey(
        secret: SecretBytes, recordID: [UInt8]
    ) throws(KeychainError) -> Curve25519.KeyAgreement.PrivateKey {
        let seed = secret.withUnsafeBytes {
            OneBlockHKDF.deriveKey(inputKeyMaterial: $0, salt: recordID[...], info: recordKeyInfo[...])
        }
        do {
            return try seed.withUnsafeBytes { try Curve25519.KeyAgreement.PrivateKey(rawRepresentation: $0) }
        } catch {
            throw KeychainError(.tampered, "The key record's secret does not give an X25519 key", underlying: error)
        }
    }

    /// Two secrets side by side in zeroized memory (HKDF input that must not linger in an array).
    static func concatenated(_ first: UnsafeRawBufferPointer, _ second: UnsafeRawBufferPointer) -> SecretBytes {
        SecretBytes(count: first.count + second.count) { buffer in
            buffer.copyMemory(from: first)
            UnsafeMutableRawBufferPointer(rebasing: buffer[first.count...]).copyMemory(from: second)
        }
    }

    /// S for `.and`: both halves are needed.
    static func combined(_ sealed: SecretBytes, _ wrapped: SecretBytes, recordID: [UInt8]) -> SecretBytes {
        let material = sealed.withUnsafeBytes { first in
            wrapped.withUnsafeBytes { second in concatenated(first, second) }
        }
        let key = material.withUnsafeBytes {
            OneBlockHKDF.deriveKey(inputKeyMaterial: $0, salt: recordID[...], info: combinedInfo[...])
        }
        return key.withUnsafeBytes { SecretBytes(copying: $0) }
    }

    /// Wraps `secret` to the device's passcode key: anyone may wrap, only the passcode unwraps.
    static func wrapForPasscode(
        _ secret: SecretBytes, passcodeKey: Curve25519.KeyAgreement.PublicKey, storeID: [UInt8],
        recordID: [UInt8]
    ) throws -> [UInt8] {
        let ephemeral = Curve25519.KeyAgreement.PrivateKey()
        let key = try wrappingKey(
            ephemeral.sharedSecretFromKeyAgreement(with: passcodeKey),
            ephemeral: Array(ephemeral.publicKey.rawRepresentation),
            passcodeKey: Array(passcodeKey.rawRepresentation), storeID: storeID, recordID: recordID)
        let sealed = try secret.withUnsafeBytes { try AES.GCM.seal($0, using: key, authenticating: recordID) }
        return Array(ephemeral.publicKey.rawRepresentation) + Array(sealed.nonce) + Array(sealed.ciphertext)
            + Array(sealed.tag)
    }

    /// Unwraps the passcode protector with the device's passcode private key.
    func unwrapPasscodeProtector(
        _ passcodePrivateKey: Curve25519.KeyAgreement.PrivateKey, path: String
    ) throws(KeychainError) -> SecretBytes {
        guard let wrapped = passcodeProtector else {
            throw KeychainError(.tampered, "\(path) has no passcode protector")
        }
        guard Array(passcodePrivateKey.publicKey.rawRepresentation) == passcodeKey else {
            throw KeychainError(
                .itemInvalidated, "\(path) was protected by a device passcode that has since been removed")
        }
        do {
            let ephemeral = try Curve25519.KeyAgreement.PublicKey(rawRepresentation: wrapped[0..<32])
            let key = try Self.wrappingKey(
                passcodePrivateKey.sharedSecretFromKeyAgreement(with: ephemeral), ephemeral: Array(wrapped[0..<32]),
                passcodeKey: passcodeKey, storeID: storeID, recordID: recordID)
            let box = try AES.GCM.SealedBox(
                nonce: AES.GCM.Nonce(data: wrapped[32..<44]), ciphertext: wrapped[44..<76], tag: wrapped[76..<92])
            let opened = try AES.GCM.open(box, using: key, authenticating: recordID)
            return opened.withUnsafeBytes { SecretBytes(copying: $0) }
        } catch {
            throw KeychainError(.tampered, "\(path): the passcode protector does not open", underlying: error)
        }
    }

    private static func wrappingKey(
        _ shared: SharedSecret, ephemeral: [UInt8], passcodeKey: [UInt8], storeID: [UInt8],
        recordID: [UInt8]
    ) -> SymmetricKey {
        shared.hkdfDerivedSymmetricKey(
            using: SHA256.self, salt: ephemeral + passcodeKey,
            sharedInfo: passcodeProtectorInfo + storeID + recordID, outputByteCount: 32)
    }

    /// The key of a protected item's secret section: the attributes key (master-derived) and the
    /// X25519 agreement between the record and the item's ephemeral key (whose public half is the
    /// item header's salt field).
    static func protectedSecretKey(
        attributesKey: SymmetricKey, shared: SharedSecret, recordPublicKey: [UInt8], storeID: [UInt8],
        recordID: [UInt8]
    ) -> SymmetricKey {
        let material = attributesKey.withUnsafeBytes { attributes in
            shared.withUnsafeBytes { agreed in concatenated(attributes, agreed) }
        }
        return material.withUnsafeBytes {
            OneBlockHKDF.deriveKey(
                inputKeyMaterial: $0, salt: recordPublicKey[...], info: protectedSecretInfo[...], storeID[...],
                recordID[...])
        }
    }
}

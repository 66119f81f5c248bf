package import KeychainVocabulary
import SystemCalls
package import TPM

// Secrets per application (the Secret portal's): derived inside the TPM by an HMAC key the TPM
// made for this store, which never leaves it, so that only this TPM, for this store, gives an
// application its secret again (docs/FORMAT.md, "Application secrets").
extension ItemStore {
    /// The access group of the store's HMAC key item, which no face may name (AccessDecision).
    package static let applicationSecretsAccessGroup = "tpm-keychain.portal"
    static let applicationSecretInfo = Array("TPMKeychain application secret v1".utf8)
    /// The longest application ID derived for: a D-Bus name is at most 255 bytes.
    package static let applicationIDLimit = 255

    private static var hmacKeyPrimary: AttributeList {
        AttributeList(ItemIdentity(unchecked: applicationSecretsAccessGroup, "portal", "hmac-key"))
    }

    /// The 64-byte secret of `application`: HMAC-SHA256 in the TPM with the store's HMAC key
    /// (made at the first call) over `TPMKeychain application secret v1` ‖ 0x00 ‖ the ID ‖ i,
    /// for i = 1 and 2, concatenated.
    ///
    /// - Throws: ``KeychainError`` `.invalidParameter` for an empty or oversized ID, the TPM's
    ///   errors, `.wrongTPM` for a key made by another TPM, `.tampered` for a damaged key item.
    package func applicationSecret(for application: String, device: Device) throws(KeychainError) -> SecretBytes {
        let id = Array(application.utf8)
        guard !id.isEmpty, id.count <= Self.applicationIDLimit, !id.contains(0) else {
            throw KeychainError(
                .invalidParameter, "An application ID has 1 to \(Self.applicationIDLimit) bytes and no NUL")
        }
        let key = try hmacKey(device: device)
        let message = Self.applicationSecretInfo + [0] + id
        return try device.withConnection { (connection) throws(KeychainError) -> SecretBytes in
            let first = try device.tpmCall { try connection.hmac(message + [1], with: key) }
            let second = try device.tpmCall { try connection.hmac(message + [2], with: key) }
            return SecretBytes(count: 64) { target in
                first.withUnsafeBytes { target.baseAddress!.copyMemory(from: $0.baseAddress!, byteCount: 32) }
                second.withUnsafeBytes { (target.baseAddress! + 32).copyMemory(from: $0.baseAddress!, byteCount: 32) }
            }
        }
    }

    /// The store's HMAC key: read from its item, or made in the TPM and stored (a second process
    /// that made one at the same time keeps the first stored).
    private func hmacKey(device: Device) throws(KeychainError) -> TPMHMACKey {
        if let stored = try storedHMACKey() { return stored }
        let made = try device.withConnection { (connection) throws(KeychainError) -> TPMHMACKey in
            try device.tpmCall { try connection.createHMACKey() }
        }
        do {
            try write(
                .genericPassword, primary: Self.hmacKeyPrimary, mode: .add,
                value: ItemValue(kind: .data, bytes: made.serialized()), changes: AttributeChanges())
        } catch  where error.code == .duplicateItem {
            if let stored = try storedHMACKey() { return stored }
        }
        return made
    }

    private func storedHMACKey() throws(KeychainError) -> TPMHMACKey? {
        guard let item = try item(.genericPassword, primary: Self.hmacKeyPrimary, withSecret: true) else { return nil }
        guard let blob = item.value else {
            throw KeychainError(.tampered, "The application secrets' key item in \(root) has no value")
        }
        do {
            return try TPMHMACKey(serialized: blob)
        } catch {
            throw KeychainError(.tampered, "The application secrets' key in \(root) is damaged: \(error)")
        }
    }
}

package import KeychainVocabulary
import SystemCalls
package import TPM

// The passkey authenticator's PIN, checked by the TPM: a random secret sealed under an
// authorization value that is the PIN's hash (CTAP's LEFT16(SHA-256(PIN))), in an object that
// counts toward the TPM's dictionary-attack lockout. A wrong PIN is the TPM's refusal, never a
// comparison in software; CTAP's own count of tries left is kept beside it, taken before each
// try, so a process killed mid-try has spent it (docs/FORMAT.md, "The authenticator's PIN").
extension ItemStore {
    /// The access group of the authenticator's own items, which no face may name (AccessDecision).
    package static let passkeysAccessGroup = "tpm-keychain.passkeys"
    /// CTAP 2.1's tries before the PIN is blocked.
    package static let pinTries: UInt32 = 8
    static let pinTriesTag = FourCharacterCode("tkpt")

    private static var pinPrimary: AttributeList {
        AttributeList(ItemIdentity(unchecked: passkeysAccessGroup, "authenticator", "pin"))
    }

    /// Tries left, or nil when no PIN is set.
    package func authenticatorPINTries() throws(KeychainError) -> UInt32? {
        try item(.genericPassword, primary: Self.pinPrimary, withSecret: false).map {
            $0.attributes.uint32(Self.pinTriesTag) ?? 0
        }
    }

    /// Sets the PIN whose hash is `pinHash` (16 bytes), replacing any, with every try back.
    package func setAuthenticatorPIN(_ pinHash: SecretBytes, device: Device) throws(KeychainError) {
        let sealed = try device.withConnection { (connection) throws(KeychainError) -> SealedObject in
            try device.tpmCall {
                try connection.generateSealedKey(authValue: pinHash, dictionaryAttackProtected: true).sealed
            }
        }
        var primary = Self.pinPrimary
        primary.setUInt32(Self.pinTries, for: Self.pinTriesTag)
        try write(
            .genericPassword, primary: primary, mode: .upsert,
            value: ItemValue(kind: .data, bytes: sealed.serialized()), changes: AttributeChanges())
    }

    /// Whether `pinHash` is the PIN's: the TPM unseals the PIN's object with it or refuses. A
    /// try is taken first and given back on success.
    ///
    /// - Returns: the tries left after a wrong PIN (0: blocked, now or before), or nil for the
    ///   right one.
    /// - Throws: ``KeychainError`` `.passcodeNotSet` with no PIN, `.lockout` while the TPM is in
    ///   dictionary-attack lockout, `.tampered` for a damaged PIN item, the TPM's errors.
    package func checkAuthenticatorPIN(_ pinHash: SecretBytes, device: Device) throws(KeychainError) -> UInt32? {
        guard let item = try item(.genericPassword, primary: Self.pinPrimary, withSecret: true) else {
            throw KeychainError(.passcodeNotSet, "The authenticator has no PIN")
        }
        let tries = item.attributes.uint32(Self.pinTriesTag) ?? 0
        // Blocked: no try left, and the TPM is not asked.
        guard tries > 0 else { return 0 }
        guard let blob = item.value, let sealed = try? SealedObject(serialized: blob) else {
            throw KeychainError(.tampered, "The authenticator's PIN item in \(root) is damaged")
        }
        try setTries(tries - 1, of: item)
        do {
            _ = try device.withConnection { (connection) throws(KeychainError) -> SecretBytes in
                try device.tpmCall { try connection.unseal(sealed, authValue: pinHash) }
            }
        } catch  where error.code == .authenticationFailed {
            return tries - 1
        }
        try setTries(Self.pinTries, of: item)
        return nil
    }

    /// Removes the PIN (the authenticator's reset).
    package func removeAuthenticatorPIN() throws(KeychainError) {
        _ = try delete(.genericPassword, primary: Self.pinPrimary)
    }

    private func setTries(_ tries: UInt32, of item: ItemQueryResult) throws(KeychainError) {
        var primary = Self.pinPrimary
        primary.setUInt32(tries, for: Self.pinTriesTag)
        try write(.genericPassword, primary: primary, mode: .update, value: nil, changes: AttributeChanges())
    }
}

import KeychainStore
package import KeychainVocabulary
package import TPM

// The passkey authenticator's PIN, checked by the TPM (``ItemStore/checkAuthenticatorPIN(_:device:)``),
// behind the door like every item: decided for the service's caller first.
extension ItemService {
    /// Tries left before the PIN blocks; nil when none is set.
    package func authenticatorPINTries() throws(KeychainError) -> UInt32? {
        try authorize(.readMetadata, group: "")
        return try store.authenticatorPINTries()
    }

    /// Sets (or replaces) the PIN whose CTAP hash is `pinHash`, with every try back.
    package func setAuthenticatorPIN(_ pinHash: SecretBytes) throws(KeychainError) {
        try authorize(.write, group: "")
        try Devices.with(location) { (device) throws(KeychainError) in
            try store.setAuthenticatorPIN(pinHash, device: device)
        }
    }

    /// Whether `pinHash` is the PIN's, as the TPM decides.
    ///
    /// - Returns: nil for the right PIN; the tries left after a wrong one (0: blocked).
    /// - Throws: ``KeychainError`` `.passcodeNotSet`, `.lockout` (the TPM's dictionary-attack lockout).
    package func checkAuthenticatorPIN(_ pinHash: SecretBytes) throws(KeychainError) -> UInt32? {
        try authorize(.readSecret, group: "")
        return try Devices.with(location) { (device) throws(KeychainError) -> UInt32? in
            try store.checkAuthenticatorPIN(pinHash, device: device)
        }
    }

    /// Removes the PIN: the authenticator's reset.
    package func removeAuthenticatorPIN() throws(KeychainError) {
        try authorize(.delete, group: "")
        try store.removeAuthenticatorPIN()
    }
}

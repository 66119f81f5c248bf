import KeychainStore
package import KeychainVocabulary
package import TPM

extension ItemService {
    /// The secret of the sandboxed application `applicationID` (the Secret portal's): 64 bytes
    /// derived in the TPM with this keychain's HMAC key, the same for that ID every time and
    /// for no other ID, and never derivable without this TPM (``ItemStore/applicationSecret(for:device:)``).
    /// Handed out only while the keychain is unlocked (its login session's lock and, with a
    /// device passcode, the device's lock state): a locked keychain's applications wait.
    ///
    /// - Throws: ``KeychainError`` `.interactionNotAllowed` while locked, `.invalidParameter`
    ///   for an empty or oversized ID, the TPM's errors.
    package func applicationSecret(for applicationID: String) throws(KeychainError) -> SecretBytes {
        try Devices.with(location) { (device) throws(KeychainError) -> SecretBytes in
            let locked = try deviceMayLock() ? isLocked(for: .whenUnlocked, device: device) : false
            if location.sessionIsLocked(for: .whenUnlocked) || locked {
                throw KeychainError(
                    .interactionNotAllowed, "The keychain is locked: an application's secret waits for its unlock")
            }
            return try store.applicationSecret(for: applicationID, device: device)
        }
    }
}

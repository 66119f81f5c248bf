package import TPMKeychain

/// What a user of the tools can do about an error. The library's messages say what happened; the
/// commands that get out of it are named here, next to the exit statuses, since only the tools'
/// users have them.
package enum Remedy {
    /// One or two sentences naming the commands for `error`'s code, or nil when there is nothing
    /// more to say than the message.
    package static func forKeychainError(_ error: KeychainError) -> String? {
        switch error.code {
        case .lockout:
            lockout
        case .rolledBack, .rollbackCounterMissing:
            "to accept the store's files as they are: tpm-keychain recover --keychain <store> with its recovery key, or without one tpm-keychain accept-rollback-risk --keychain <store>"
        case .wrongTPM:
            "if the store has a recovery key, tpm-keychain recover --keychain <store> seals it to this TPM"
        case .itemInvalidated:
            "tpm-keychain purge-invalidated --keychain <store> deletes every item that can never open again"
        case .interactionNotAllowed:
            "if the keychain is locked, tpm-keychain unlock-keychain unlocks it with the device passcode"
        case .passcodeNotSet:
            "tpm-keychain set-passcode sets a device passcode"
        case .notAvailable:
            "tpm-keychain tpm-status --keychain <store> shows the TPM, the device's NV indices and whether the store has a recovery key (tpm-keychain add-recovery-key adds one)"
        default:
            nil
        }
    }

    /// For a TPM in dictionary-attack lockout, from either layer.
    package static let lockout = """
        a simulated TPM (and any TPM whose lockout hierarchy has no password) is unlocked with: \
        tpm-keychain reset-lockout --keychain <store>. A hardware TPM forgets one failure per \
        recovery interval while it runs (tpm-keychain tpm-status shows both)
        """
}

import FoundationEssentials
import KeychainVocabulary
import SystemCalls
import TPM

// The master key and its user (docs/SECURITY.md, "User binding"): sealed with the user's binding
// secret where the enrollment helper gives one, so the store's files open for nobody else.
extension ItemStore {
    /// The secret the master key in `metadata` is sealed with: its user's binding secret when the
    /// store is bound, else none.
    ///
    /// - Throws: ``KeychainError`` `.permissionDenied` (another user), `.notAvailable` (no helper).
    static func bindingSecret(of metadata: StoreMetadata, root: String) throws(KeychainError) -> UserBinding.Secret? {
        guard let user = metadata.facts?.boundUser else { return nil }
        return try UserBinding.secret(forStoreBoundTo: user, at: root)
    }

    /// The binding secret a store shared as `sharing` gets when its master key is sealed now: only
    /// a private store is bound, and only where a helper gives a secret. A helper that does not
    /// answer binds nothing now; a later open binds the store.
    static func newBinding(for sharing: Sharing) -> SecretBytes? {
        guard sharing == .owner else { return nil }
        return UserBinding.secretIfAvailable()
    }

    /// Seals `masterKey` to the TPM with `binding` as its authorization value. Never dictionary-
    /// attack protected: the binding is a full-strength secret, and another user's failed guesses
    /// must not lock the TPM for everyone.
    static func sealMasterKey(
        _ masterKey: SecretBytes, binding: SecretBytes?, tpm: TPMConnection
    ) throws -> SealedObject {
        try tpm.seal(masterKey, authValue: binding, dictionaryAttackProtected: false)
    }

    /// A new master key sealed with `binding`.
    static func generateMasterKey(
        binding: SecretBytes?, tpm: TPMConnection
    ) throws -> (key: SecretBytes, sealed: SealedObject) {
        try tpm.generateSealedKey(authValue: binding, dictionaryAttackProtected: false)
    }

    /// Unseals the master key; a binding the TPM refuses is told as such, not as a wrong PIN.
    /// A refused secret from the keyring is asked of the helper again, once.
    static func unsealMasterKey(
        of metadata: StoreMetadata, binding: UserBinding.Secret?, tpm: TPMConnection, root: String
    ) throws -> SecretBytes {
        do {
            return try tpm.unseal(metadata.sealedMasterKey, authValue: binding?.bytes)
        } catch let error as TPMError where error.code == .authorizationFailed && binding?.cached == true {
            UserKeyring.remove(UserBinding.cacheName)
            let fresh = try metadata.facts?.boundUser.map { (user) throws(KeychainError) in
                try UserBinding.secret(forStoreBoundTo: user, at: root, fresh: true)
            }
            return try unsealMasterKey(of: metadata, binding: fresh, tpm: tpm, root: root)
        } catch let error as TPMError where error.code == .authorizationFailed && binding != nil {
            throw KeychainError(
                .permissionDenied,
                "The keychain at \(root) is bound to its user, and this user's binding secret does not open it: it was bound for another user, or the enrollment helper's key (/var/lib/tpm-keychain-enrollment/key) was replaced. If the store has a recovery key, recovering with it binds it again",
                underlying: error)
        }
    }
}

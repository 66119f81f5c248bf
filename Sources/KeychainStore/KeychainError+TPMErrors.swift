import Crypto
import FoundationEssentials
import KeychainVocabulary
import SystemCalls
import TPM

#if canImport(Glibc)
import Glibc
#endif

// TPM errors met while opening a store, in the keychain's words.
extension KeychainError {
    /// The store's view of a TPM failure while opening it.
    init(tpmError error: TPMError, store: String) {
        switch error.code {
        case .wrongStorageKey:
            self.init(
                .wrongTPM,
                "The keychain at \(store) was sealed by another TPM (it was copied from another machine, or this TPM was cleared or replaced); it cannot be opened here. If it has a recovery key, recovering with it seals it to this TPM",
                underlying: error)
        case .tpmUnavailable:
            self.init(
                .tpmUnavailable, "The keychain at \(store) needs the TPM, which cannot be reached", underlying: error)
        case .busy, .timedOut:
            self.init(
                .timedOut, "The keychain at \(store) could not get an answer from the TPM in time", underlying: error)
        case .lockout:
            self.init(.lockout, "The TPM is in dictionary-attack lockout", underlying: error)
        case .ownerAuthorizationFailed:
            self.init(
                .authenticationFailed,
                "The keychain at \(store) needs the TPM's owner hierarchy, which has a password: set TPM_KEYCHAIN_OWNER_AUTH to it, or TPM_KEYCHAIN_OWNER_AUTH_FILE to a file that holds it (it was missing or wrong)",
                underlying: error)
        // The master key has no PIN and one fixed policy: the TPM refusing it, or failing to
        // parse or load it, means the stored bytes changed, not that the TPM is unwell.
        case .malformedData, .policyCheckFailed, .authorizationFailed, .invalidArgument:
            self.init(
                .tampered,
                "The keychain's sealed master key in \(store)/\(StoreMetadata.fileName) is damaged or was modified",
                underlying: error)
        default:
            self.init(.tpmUnavailable, "The TPM failed while opening the keychain at \(store)", underlying: error)
        }
    }
}

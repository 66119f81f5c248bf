import Crypto
import FoundationEssentials
import KeychainVocabulary
import SystemCalls
import TPM

#if canImport(Glibc)
import Glibc
#endif

// Unsealing an existing store's master key: store.meta read and authenticated, the key unsealed
// (and resealed as noDA when an older version sealed it otherwise), and its rollback counter read.
extension ItemStore {
    /// Reads and authenticates store.meta, unsealing the master key (and resealing it as noDA
    /// when an older version sealed it with dictionary-attack protection).
    ///
    /// - Parameter bind: whether a private store not yet bound to its user is bound now, where
    ///   the enrollment helper gives a binding secret (only with the store lock held exclusively).
    static func unlock(
        _ rootDirectory: Directory, tpm: TPMConfiguration, cache: StorageKeyContextFile, bind: Bool = false
    )
        throws(KeychainError) -> Unlocked
    {
        let root = rootDirectory.path
        let metadataPath = root + "/" + StoreMetadata.fileName
        guard let file = try rootDirectory.openFile(StoreMetadata.fileName) else {
            throw KeychainError(.storageFailed, "\(metadataPath) disappeared while the store was locked")
        }
        guard file.size <= StoreMetadata.maximumFileSize else {
            throw KeychainError(.tampered, "\(metadataPath) is too large to be store metadata")
        }
        let parsed = try StoreMetadata.parse(try file.read(count: file.size, at: 0), path: metadataPath)
        let sealed = parsed.metadata.sealedMasterKey
        let counterIndex = parsed.metadata.rollbackCounter
        let binding = try bindingSecret(of: parsed.metadata, root: root)
        // Only a store that records its facts can record its user (a pre-version-6 store is
        // bound by the open after the one that records them).
        let newBinding =
            bind && binding == nil && parsed.metadata.facts?.sharing == .owner && rootDirectory.sharing == .owner
            ? newBinding(for: .owner) : nil
        let (keys, resealed, counterValue) = try withTPM(tpm, root: root, cache: cache) { tpm in
            let key = try unsealMasterKey(of: parsed.metadata, binding: binding, tpm: tpm, root: root)
            let keys = key.withUnsafeBytes {
                StoreKeys(masterKey: SymmetricKey(data: $0), storeID: parsed.metadata.storeID)
            }
            // Authenticated before the counter is read with a key derived from it.
            try parsed.verify(metadataKey: keys.metadata)
            // The read is the connection's last command in a session unless the key is resealed.
            let reseals = sealed.isDictionaryAttackProtected || newBinding != nil
            let counter = counterIndex.map { counterResult($0, keys: keys, tpm: tpm, store: root, last: !reseals) }
            return (
                keys, reseals ? try sealMasterKey(key, binding: binding?.bytes ?? newBinding, tpm: tpm) : nil, counter
            )
        }
        if let resealed {
            // Authenticated first, so a forged file is never rewritten as genuine. The old file
            // keeps working until the rename; the new one differs in the sealed object and, when
            // bound now, the user it names.
            var migrated = parsed.metadata
            migrated.sealedMasterKey = resealed
            if newBinding != nil { migrated.facts?.boundUser = UserBinding.currentUser }
            do {
                try rootDirectory.replace(
                    StoreMetadata.fileName, with: migrated.serialized(metadataKey: keys.metadata), durable: true)
            } catch
                where newBinding != nil && !sealed.isDictionaryAttackProtected
                && (error.code == .permissionDenied || error.code == .storageFailed)
            {
                // A store this open cannot write (a read-only mount) is bound by a later open.
                return Unlocked(
                    storeID: parsed.metadata.storeID, keys: keys, version: parsed.metadata.version,
                    metadataIdentity: file.identity,
                    counterIndex: counterIndex, counter: counterValue, facts: parsed.metadata.facts)
            }
            let identity = try metadataIdentity(in: rootDirectory, "while it was resealed")
            return Unlocked(
                storeID: parsed.metadata.storeID, keys: keys, version: parsed.metadata.version,
                metadataIdentity: identity,
                counterIndex: counterIndex, counter: counterValue, facts: migrated.facts)
        }
        return Unlocked(
            storeID: parsed.metadata.storeID, keys: keys, version: parsed.metadata.version,
            metadataIdentity: file.identity,
            counterIndex: counterIndex, counter: counterValue, facts: parsed.metadata.facts)
    }

    /// What opening learned from store.meta and the TPM.
    struct Unlocked {
        let storeID: [UInt8]
        let keys: StoreKeys
        let version: UInt16
        var metadataIdentity: FileIdentity
        var counterIndex: UInt32?
        /// The counter's value, or why it could not be read: reported after the layout is checked,
        /// since a store.meta put back from before a rotation names a counter the rotation deleted.
        var counter: Result<UInt64, KeychainError>?
        /// What store.meta records the store was made for; nil before version 6.
        var facts: StoreMetadata.Facts?

        var counterValue: UInt64? {
            get throws(KeychainError) { try counter?.get() }
        }
    }

    static func counterResult(
        _ index: UInt32, keys: StoreKeys, tpm: TPMConnection, store: String, last: Bool = false
    ) -> Result<UInt64, KeychainError> {
        do {
            return .success(try readCounter(index, keys: keys, tpm: tpm, store: store, last: last))
        } catch {
            return .failure(error)
        }
    }

    /// A new rollback counter, or nil when this TPM cannot hold one (no room, no usable owner
    /// hierarchy): the store then works without rollback detection, as ``ItemStore/isRollbackProtected`` reports.
    static func defineCounterIfPossible(
        keys: StoreKeys, tpm: TPMConfiguration, root: String,
        cache: StorageKeyContextFile
    ) throws(KeychainError) -> (index: UInt32, value: UInt64)? {
        do {
            return try withTPM(tpm, root: root, cache: cache) { try defineCounter(keys: keys, tpm: $0, store: root) }
        } catch  where error.code == .notAvailable {
            return nil
        }
    }
}

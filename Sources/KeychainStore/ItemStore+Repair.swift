import Crypto
import FoundationEssentials
package import KeychainVocabulary
import SystemCalls
package import TPM
import WireFormat

#if canImport(Glibc)
import Glibc
#endif

// Repairing a store whose TPM is gone or whose counter is lost: sealing it to this TPM with its
// recovery key, or accepting its files as they are.
extension ItemStore {
    /// Opens the master key with `recoveryKey` and seals it to `tpm` (the current TPM), replacing
    /// store.meta's sealed object; then deletes the items that were bound to the old TPM. Holds
    /// the store lock exclusively. The recovery key stays valid.
    ///
    /// - Throws: ``KeychainError`` `.authenticationFailed` (another recovery key), `.notAvailable`
    ///   (the store has no recovery key), `.storeNotFound`, `.tampered` (store.meta does not
    ///   belong with the recovery file), `.wrongTPM` (a store made on a TPM device, recovered onto a
    ///   simulator), `.unsafeFileSystem` (its directory not shared as it was created),
    ///   `.tpmUnavailable`, `.storageFailed`.
    /// - Parameter tpmKind: what `tpm` is (``open(at:tpm:durable:create:newStoreVersion:lendTPM:sharedGroup:tpmKind:)``).
    package static func recover(
        at root: String, recoveryKey: SecretBytes, tpm: TPMConfiguration,
        tpmKind: TPMKind? = nil
    ) throws(KeychainError) -> Recovery {
        let kind = tpmKind ?? TPMKind(tpm)
        let (rootDirectory, lock, parsed) = try lockedForRepair(root, tpm: tpm, purpose: "recovering it")
        defer { withExtendedLifetime(lock) {} }
        guard try rootDirectory.openFile(RecoveryFile.fileName) != nil else {
            throw KeychainError(
                .notAvailable,
                "The keychain at \(root) has no recovery key (one is added before the TPM changes); its items cannot be recovered"
            )
        }
        // recovery.key, or a rotation's recovery.key.next when that rotation committed but was
        // killed before renaming it: the one whose key authenticates store.meta.
        var opened: (masterKey: SecretBytes, keys: StoreKeys)?
        var firstError: KeychainError?
        for name in [RecoveryFile.fileName, RecoveryFile.nextFileName] {
            guard let file = try rootDirectory.openFile(name) else { continue }
            do throws(KeychainError) {
                guard file.size == RecoveryFile.size || file.size == RecoveryFile.unauthenticatedSize else {
                    throw KeychainError(.tampered, "\(file.path) is damaged")
                }
                let bytes = try file.read(count: file.size, at: 0)
                let masterKey = try RecoveryFile.open(
                    bytes, recoveryKey: recoveryKey, storeID: parsed.metadata.storeID, path: file.path)
                let keys = masterKey.withUnsafeBytes {
                    StoreKeys(masterKey: SymmetricKey(data: $0), storeID: parsed.metadata.storeID)
                }
                if file.size == RecoveryFile.size {
                    _ = try RecoveryFile.authenticatedHeader(bytes, metadataKey: keys.metadata, path: file.path)
                }
                // The recovery file and store.meta must belong together: the key it holds authenticates store.meta.
                try parsed.verify(metadataKey: keys.metadata)
                opened = (masterKey, keys)
                break
            } catch {
                firstError = firstError ?? error
            }
        }
        guard let (masterKey, keys) = opened else {
            throw firstError ?? KeychainError(.tampered, "\(root)/\(RecoveryFile.fileName) is damaged")
        }
        // Recovery seals the master key to whatever TPM it is given: never a simulator's, for a
        // store that was made on a TPM device.
        try checkFacts(parsed.metadata.facts, of: rootDirectory, openedWith: kind)
        try finishRecoveryKeyRotation(in: rootDirectory, keys: keys)
        // What belonged to the old TPM goes first: killed before the new store.meta is written, the
        // store still opens on no TPM, and running recover again finishes the job.
        let layout = try layout(of: rootDirectory, version: parsed.metadata.version, keys: keys)
        let counts = try removeItemsBoundToTheOldTPM(
            layout, in: rootDirectory, keys: keys, storeID: parsed.metadata.storeID)
        let cache = StorageKeyContextFile(directory: rootDirectory)
        // Bound to the user who recovers it, where the helper gives a binding: recovery is also
        // how a store whose binding no longer opens it (the helper's key lost) is bound again.
        let binding = parsed.metadata.version >= 2 ? newBinding(for: rootDirectory.sharing) : nil
        let sealed = try withTPM(tpm, root: root, cache: cache) {
            try sealMasterKey(masterKey, binding: binding, tpm: $0)
        }
        // The files are accepted as they are now: a new counter (the old one belongs to the old
        // TPM, or was deleted) and a manifest listing them, before store.meta names both.
        var counter: (index: UInt32, value: UInt64)?
        if parsed.metadata.version >= 2 {
            do {
                counter = try withTPM(tpm, root: root, cache: cache) {
                    try defineCounter(keys: keys, tpm: $0, store: root)
                }
            } catch  where error.code == .notAvailable {
                counter = nil
            }
        }
        if let counter {
            try writeManifest(
                layout.manifest, listing: layout, in: rootDirectory, keys: keys, storeID: parsed.metadata.storeID,
                counterIndex: counter.index,
                epoch: counter.value)
        }
        var metadata = parsed.metadata
        (metadata.sealedMasterKey, metadata.rollbackCounter) = (sealed, counter?.index)
        if parsed.metadata.version >= 2 {
            metadata.facts = .init(
                tpm: kind, sharing: rootDirectory.sharing, boundUser: binding == nil ? nil : UserBinding.currentUser)
        }
        try rootDirectory.replace(
            StoreMetadata.fileName, with: metadata.serialized(metadataKey: keys.metadata), durable: true)
        return counts
    }

    /// For a rollback-protected store whose counter is gone from the TPM (`rollbackCounterMissing`:
    /// someone with the owner's authorization undefined it, or it was lost), by whoever this TPM
    /// unseals the master key for: accepts the store's files as they are now, with a new counter and
    /// a manifest listing them, as a recovery does, without a recovery key. Older copies of items
    /// put back before this are then accepted too: that is the risk the caller accepts.
    ///
    /// - Returns: how many items the new manifest lists.
    /// - Throws: ``KeychainError`` `.invalidParameter` when the store is not protected or its counter is
    ///   there (nothing to accept), `.wrongTPM`, `.tampered`, `.notAvailable` (no room for a counter),
    ///   `.storeNotFound`, `.tpmUnavailable`, `.storageFailed`.
    package static func acceptFilesAsTheyAre(
        at root: String, tpm: TPMConfiguration, tpmKind: TPMKind? = nil
    ) throws(KeychainError) -> Int {
        let (rootDirectory, lock, parsed) = try lockedForRepair(
            root, tpm: tpm, purpose: "accepting its files as they are")
        defer { withExtendedLifetime(lock) {} }
        guard let oldCounter = parsed.metadata.rollbackCounter else {
            throw KeychainError(
                .invalidParameter, "The keychain at \(root) has no rollback counter: there is nothing to accept")
        }
        let cache = StorageKeyContextFile(directory: rootDirectory)
        let storeID = parsed.metadata.storeID
        let binding = try bindingSecret(of: parsed.metadata, root: root)
        let masterKey = try withTPM(tpm, root: root, cache: cache) {
            try unsealMasterKey(of: parsed.metadata, binding: binding, tpm: $0, root: root)
        }
        let keys = masterKey.withUnsafeBytes { StoreKeys(masterKey: SymmetricKey(data: $0), storeID: storeID) }
        try parsed.verify(metadataKey: keys.metadata)
        try checkFacts(parsed.metadata.facts, of: rootDirectory, openedWith: tpmKind ?? TPMKind(tpm))
        let counter = try withTPM(tpm, root: root, cache: cache) { (connection) -> (index: UInt32, value: UInt64) in
            guard case .failure(let error) = counterResult(oldCounter, keys: keys, tpm: connection, store: root),
                error.code == .rollbackCounterMissing
            else {
                throw KeychainError(
                    .invalidParameter,
                    "The rollback counter of the keychain at \(root) is there: its files are checked against it, and there is nothing to accept"
                )
            }
            return try defineCounter(keys: keys, tpm: connection, store: root)
        }
        let layout = try layout(of: rootDirectory, version: parsed.metadata.version, keys: keys)
        let listed = try writeManifest(
            layout.manifest, listing: layout, in: rootDirectory, keys: keys, storeID: storeID,
            counterIndex: counter.index, epoch: counter.value)
        var metadata = parsed.metadata
        metadata.rollbackCounter = counter.index
        try rootDirectory.replace(
            StoreMetadata.fileName, with: metadata.serialized(metadataKey: keys.metadata), durable: true)
        return listed
    }

    /// A store that cannot be opened the usual way, for a repair: its root, held exclusively
    /// (`purpose` names why for whoever waits), and store.meta parsed without the TPM.
    ///
    /// - Throws: ``KeychainError`` `.storeNotFound`, `.tampered`, `.timedOut`, `.unsafeFileSystem`.
    private static func lockedForRepair(
        _ root: String, tpm: TPMConfiguration,
        purpose: String
    ) throws(KeychainError) -> (Directory, LockFile, StoreMetadata.Parsed) {
        guard root.hasPrefix("/"),
            let rootDirectory = try Directory.open(root, in: nil, create: false, storeRoot: true),
            let metadataFile = try rootDirectory.openFile(StoreMetadata.fileName)
        else {
            throw KeychainError(.storeNotFound, "No keychain store at \(root)")
        }
        let lock = try rootDirectory.lockItself(timeout: tpm.timeout, purpose: purpose)
        let metadataPath = root + "/" + StoreMetadata.fileName
        guard metadataFile.size <= StoreMetadata.maximumFileSize else {
            throw KeychainError(.tampered, "\(metadataPath) is damaged")
        }
        let parsed = try StoreMetadata.parse(try metadataFile.read(count: metadataFile.size, at: 0), path: metadataPath)
        return (rootDirectory, lock, parsed)
    }

    /// Deletes every item whose accessibility is this-device-only or whose secret is behind a key
    /// record, and every key record: after a TPM change none of them can be opened (records are
    /// sealed to the old TPM's NV state and passcode key), and this-device-only items must not
    /// follow a store to another TPM. The caller holds the store lock exclusively.
    private static func removeItemsBoundToTheOldTPM(
        _ layout: Layout, in rootDirectory: Directory, keys: StoreKeys,
        storeID: [UInt8]
    ) throws(KeychainError) -> Recovery {
        var kept = 0
        var removed = 0
        var doomed: [(Directory, String)] = []
        for group in try layout.items.entries() where !group.hasPrefix(".") {
            guard let directory = try Directory.open(group, in: layout.items, create: false) else { continue }
            for name in try directory.entries() where name.hasSuffix(".item") {
                guard let file = try directory.openFile(name) else { continue }
                let boundToTheTPM: Bool
                if layout.version == 1 {
                    guard file.size >= ItemFileV1.headerSize else {
                        throw KeychainError(.tampered, "\(file.path) is truncated")
                    }
                    let header = try ItemFileV1.decodeHeader(
                        try file.read(count: ItemFileV1.headerSize, at: 0)[...], fileSize: file.size,
                        storeID: storeID, path: file.path)
                    boundToTheTPM = header.accessibility.isThisDeviceOnly
                } else {
                    guard file.size >= ItemFileV2.headerSize,
                        file.size <= ItemFileV2.headerSize + ItemFileV2.maximumAttributesSize
                            + ItemValue.maximumSize + 2 * ItemFileV2.tagSize
                    else { throw KeychainError(.tampered, "\(file.path) has an impossible size") }
                    let bytes = try file.read(count: file.size, at: 0)
                    let header = try ItemFileV2.decodeHeader(
                        bytes[...], fileSize: file.size, storeID: storeID, path: file.path)
                    // The header is authenticated (it is the attributes section's AAD) before it decides
                    // what is deleted: an edited class or record ID fails here, as `tampered`.
                    let key = ItemFileV2.itemKey(
                        parent: keys.items, salt: header.salt, storeID: storeID, keyRecord: header.keyRecord)
                    _ = try ItemFileV2.decryptAttributes(
                        bytes[header.attributesRange], header: header, key: key, path: file.path)
                    boundToTheTPM =
                        header.keyRecord != ItemFileV2.masterKeyRecord || header.accessibility.isThisDeviceOnly
                }
                if boundToTheTPM {
                    doomed.append((directory, name))
                } else {
                    kept += 1
                }
            }
        }
        // Every item was read and authenticated before the first removal: a damaged one stops the
        // recovery with nothing removed.
        var changed: [String: Directory] = [:]
        for (directory, name) in doomed {
            _ = try directory.remove(name, durable: false)
            changed[directory.path] = directory
        }
        for directory in changed.values { try directory.sync() }
        removed = doomed.count
        _ = try rootDirectory.removeTree(layout.records)
        return Recovery(kept: kept, removed: removed)
    }

    /// The master key, unsealed from store.meta and checked against the store's current keys.
    static func unsealMasterKey(
        _ rootDirectory: Directory, tpm: TPMConfiguration, storeID: [UInt8],
        keys: StoreKeys
    ) throws(KeychainError) -> SecretBytes {
        let metadata = try authenticatedMetadata(of: rootDirectory, keys: keys, storeID: storeID)
        let root = rootDirectory.path
        let binding = try bindingSecret(of: metadata, root: root)
        return try withTPM(tpm, root: root, cache: StorageKeyContextFile(directory: rootDirectory)) {
            try unsealMasterKey(of: metadata, binding: binding, tpm: $0, root: root)
        }
    }
}

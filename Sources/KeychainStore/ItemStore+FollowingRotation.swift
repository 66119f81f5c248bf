import Crypto
import FoundationEssentials
import KeychainVocabulary
import SystemCalls
import TPM

// Following another process's rotation: adopting the master key store.meta names now, and
// removing the directories of key generations no one uses any more.
extension ItemStore {
    /// Adopts the store's current master key when store.meta is no longer the file `state`'s keys
    /// came from (another process rotated the key): one fstatat when nothing changed; otherwise
    /// the TPM unseals the new key.
    ///
    /// - Returns: whether the keys changed.
    /// - Throws: ``KeychainError`` as opening does (`.tampered`, `.wrongTPM`, `.tpmUnavailable`, ...).
    func refreshIfRotated(_ state: OpenState) throws(KeychainError) -> Bool {
        guard state.layout.version == 2, let identity = try rootDirectory.identity(of: StoreMetadata.fileName),
            identity != state.metadataIdentity
        else { return false }
        let unlocked = try withLentTPM { (tpm) throws(KeychainError) in
            try Self.unlock(rootDirectory, tpm: tpm, cache: StorageKeyContextFile(directory: rootDirectory))
        }
        guard unlocked.storeID == storeID else {
            throw KeychainError(.tampered, "\(root)/\(StoreMetadata.fileName) now belongs to another store")
        }
        let layout = try Self.layout(of: rootDirectory, version: unlocked.version, keys: unlocked.keys)
        var rollbackState: RollbackGuard.State?
        if let index = unlocked.counterIndex, let value = try unlocked.counterValue {
            rollbackState = try Self.loadManifest(
                rootDirectory, name: layout.manifest, keys: unlocked.keys, storeID: storeID,
                counterIndex: index, counter: value)
        }
        adopt(OpenState(keys: unlocked.keys, layout: layout, metadataIdentity: unlocked.metadataIdentity))
        rollback.replace(with: rollbackState)
        return true
    }

    /// Runs a read; when it found nothing and another process rotated the master key meanwhile
    /// (this process's directories are gone), adopts the new key and reads once more. A hit needs
    /// no check: it is the current value (see the top of this file).
    func readFollowingRotation<T>(_ read: (OpenState) throws(KeychainError) -> T?) throws(KeychainError) -> T? {
        let state = try currentFollowingUpgrades()
        if let found = try read(state) { return found }
        guard try refreshIfRotated(state) else { return nil }
        return try read(try current())
    }

    /// Removes the directories of every other master key than `layout`'s: a rotation's copy that
    /// was never committed, or the old key's after a commit. Only with the store lock held
    /// exclusively, or shared by a writer that has adopted the current key.
    static func removeOtherKeyGenerations(in rootDirectory: Directory, keeping layout: Layout) throws(KeychainError) {
        let keptItems = layout.items.path.split(separator: "/").last.map(String.init) ?? itemsV2Directory
        for entry in try rootDirectory.entries() {
            let isItems = entry == itemsV2Directory || entry.hasPrefix(itemsV2Directory + "-")
            let isRecords = entry == KeyRecord.directoryName || entry.hasPrefix(KeyRecord.directoryName + "-")
            let isManifest = entry.hasPrefix(Manifest.fileName)
            guard isItems || isRecords || isManifest, entry != keptItems, entry != layout.records,
                entry != layout.manifest, entry != layout.manifest + ".lock"
            else { continue }
            if isManifest {
                _ = try rootDirectory.remove(entry, durable: false)
            } else {
                try rootDirectory.removeTree(entry)
            }
        }
    }

    /// Deletes a counter this store no longer uses; a failure only leaves an unused NV index.
    package func undefineCounter(_ index: UInt32) {
        _ = try? withLentTPM { (configuration) throws(KeychainError) in
            try Self.withTPM(configuration, root: root, cache: nil) { try $0.undefineNVIndex(index) }
        }
    }
}

import Crypto
import FoundationEssentials
import KeychainVocabulary
import SystemCalls
import TPM

#if canImport(Glibc)
import Glibc
#endif

// What a store records about itself, checked at every open and written once into a store from
// before it: the TPM it was made on, its sharing, and its rollback counter.
extension ItemStore {
    /// Gives a store from before rollback protection its counter and manifest, once, when this
    /// TPM can hold a counter: store.meta naming the counter is the commit (before it, the store
    /// is as it was).
    static func addCounter(
        to opened: inout Unlocked, layout: Layout, in rootDirectory: Directory, tpm: TPMConfiguration,
        cache: StorageKeyContextFile
    ) throws(KeychainError) {
        let root = rootDirectory.path
        guard let counter = try defineCounterIfPossible(keys: opened.keys, tpm: tpm, root: root, cache: cache) else {
            return
        }
        try writeManifest(
            layout.manifest, listing: layout, in: rootDirectory, keys: opened.keys, storeID: opened.storeID,
            counterIndex: counter.index,
            epoch: counter.value)
        var protected = try authenticatedMetadata(of: rootDirectory, keys: opened.keys, storeID: opened.storeID)
        protected.rollbackCounter = counter.index
        try rootDirectory.replace(
            StoreMetadata.fileName, with: protected.serialized(metadataKey: opened.keys.metadata), durable: true)
        let identity = try metadataIdentity(in: rootDirectory, "while the store was locked")
        (opened.counterIndex, opened.counter, opened.metadataIdentity) = (
            counter.index, .success(counter.value), identity
        )
    }

    /// Rewrites store.meta (held locked, authenticated by this open) as version 6 with `facts`.
    static func recordFacts(
        _ facts: StoreMetadata.Facts, in opened: inout Unlocked, rootDirectory: Directory
    ) throws(KeychainError) {
        var metadata = try authenticatedMetadata(of: rootDirectory, keys: opened.keys, storeID: opened.storeID)
        metadata.facts = facts
        try rootDirectory.replace(
            StoreMetadata.fileName, with: metadata.serialized(metadataKey: opened.keys.metadata), durable: true)
        opened.metadataIdentity = try metadataIdentity(in: rootDirectory, "while the store was locked")
        opened.facts = facts
    }

    /// What store.meta says the store was made for, against what it is opened with: a store made
    /// on a TPM device is never used through a simulator, and its directory must still be shared
    /// (or not) as it was created. Nil facts (a store from before version 6) check nothing.
    ///
    /// - Throws: ``KeychainError`` `.wrongTPM`, `.unsafeFileSystem`.
    static func checkFacts(
        _ facts: StoreMetadata.Facts?, of rootDirectory: Directory, openedWith kind: TPMKind
    ) throws(KeychainError) {
        guard let facts else { return }
        let root = rootDirectory.path
        if facts.tpm == .device && kind.isSimulated {
            throw KeychainError(
                .wrongTPM,
                "The keychain at \(root) was created on a TPM device, and is being opened with \(kind.description): a store bound to hardware is never used through a simulator. Unset \(TPMConfiguration.environmentVariable) if it names a simulator"
            )
        }
        switch (facts.sharing, rootDirectory.sharing) {
        case (let recorded, let found) where recorded == found:
            return
        case (.owner, .group(let group)):
            throw KeychainError(
                .unsafeFileSystem,
                "The keychain at \(root) was created for this user alone, but its directory is now shared with group \(group) (mode 2770): refusing to use it. If that was not your doing, check who else can write there; chmod 700 \(root) makes it private again"
            )
        case (.group(let group), .owner):
            throw KeychainError(
                .unsafeFileSystem,
                "The keychain at \(root) was created shared with group \(group), but its directory is no longer shared (mode 2770 in that group): refusing to use it. chgrp \(group) \(root) && chmod 2770 \(root) restores it"
            )
        case (.group(let recorded), .group(let found)):
            throw KeychainError(
                .unsafeFileSystem,
                "The keychain at \(root) was created shared with group \(recorded), but its directory now belongs to group \(found): refusing to use it. chgrp \(recorded) \(root) restores it"
            )
        default:
            throw KeychainError(.unsafeFileSystem, "The keychain at \(root) is not shared as it was created")
        }
    }

    /// A store whose metadata names no counter, but whose counter exists in the TPM (its handle
    /// derives from the store's keys, and it answers their authorization), is a copy from before
    /// the store was protected: refused as rolled back.
    static func refuseIfOnceProtected(
        _ keys: StoreKeys, in rootDirectory: Directory, tpm: TPMConfiguration,
        cache: StorageKeyContextFile
    ) throws(KeychainError) {
        let root = rootDirectory.path
        if let existing = try withTPM(tpm, root: root, cache: cache, { counterOnceDefined(keys: keys, tpm: $0) }) {
            throw KeychainError(
                .rolledBack,
                "The keychain store at \(root) names no rollback counter, but the counter it was given (TPM NV index 0x\(String(existing, radix: 16))) exists: these files are a copy from before the store was protected. Restore the newest backup, or recover the store with its recovery key (or accept the rollback risk) to accept these files as they are"
            )
        }
    }
}

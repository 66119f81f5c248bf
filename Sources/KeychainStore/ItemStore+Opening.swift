import Crypto
import FoundationEssentials
package import KeychainVocabulary
import SystemCalls
package import TPM

#if canImport(Glibc)
import Glibc
#endif

// Finding, creating and opening a store: unsealing its master key with the TPM.
extension ItemStore {
    /// Lends the store a TPM for the work it does after opening (rollback counters, key records,
    /// rotation): the API layer decides which TPM, and releases a simulator it started.
    package typealias TPMLender = @Sendable () throws(KeychainError) -> TPMLease

    package static func open(
        at root: String, tpm: TPMConfiguration, durable: Bool = true, create: Bool = true,
        newStoreVersion: UInt16 = StoreMetadata.currentVersion,
        lendTPM: TPMLender? = nil, sharedGroup: UInt32? = nil, tpmKind: TPMKind? = nil
    ) throws(KeychainError) -> ItemStore {
        try validate(root)
        let lender = lendTPM ?? { TPMLease(configuration: tpm) }
        let kind = tpmKind ?? TPMKind(tpm)
        if let directory = try Directory.open(root, in: nil, create: false, storeRoot: true) {
            return try open(
                directory, tpm: tpm, kind: kind, durable: durable, create: create, newStoreVersion: newStoreVersion,
                sealedKey: nil,
                lendTPM: lender, sharedGroup: sharedGroup)
        }
        guard create else { throw storeNotFound(root) }
        // Asked before the TPM is: the helper's answer must not hold the TPM's access lock.
        let binding = newStoreVersion >= 2 ? newBinding(for: sharedGroup.map { .group($0) } ?? .owner) : nil
        let sealedKey = try withTPM(tpm, root: root, cache: nil) { try generateMasterKey(binding: binding, tpm: $0) }
        if sharedGroup == nil {
            try createParents(of: root)
        } else if !FileManager.default.fileExists(
            atPath: String(root[..<(root.lastIndex(of: "/") ?? root.startIndex)]) + "/")
        {
            throw KeychainError(
                .invalidParameter,
                "A shared store is created only in an existing directory that the group's members can reach: create the parent of \(root) first"
            )
        }
        guard let directory = try Directory.open(root, in: nil, create: true, storeRoot: true, shareWith: sharedGroup)
        else {
            throw KeychainError(.storageFailed, "Cannot create \(root)")
        }
        return try open(
            directory, tpm: tpm, kind: kind, durable: durable, create: create, newStoreVersion: newStoreVersion,
            sealedKey: (sealedKey.key, sealedKey.sealed, binding == nil ? nil : UserBinding.currentUser),
            lendTPM: lender, sharedGroup: sharedGroup)
    }

    /// A store is created only in a directory whose sharing is the one asked for: a directory
    /// someone made 2770 for their group must not turn a private store into a shared one (nor a
    /// private directory hold a "shared" store its group cannot reach).
    /// A shared directory must also be this user's: one another member made (and could have put
    /// something in first) is not where this user's store is created.
    private static func checkSharingForCreation(
        _ rootDirectory: Directory, asked sharedGroup: UInt32?
    ) throws(KeychainError) {
        switch (rootDirectory.sharing, sharedGroup) {
        case (.owner, nil):
            return
        case (.group(let group), let asked?) where group == asked:
            let owner = try rootDirectory.owner()
            guard owner == Ownership.effectiveUser else {
                throw KeychainError(
                    .unsafeFileSystem,
                    "\(rootDirectory.path) was made by user \(owner), not by this user (\(Ownership.effectiveUser)): a store is created only in a directory this user made. Create the store in a new directory"
                )
            }
            return
        case (.group(let group), nil):
            throw KeychainError(
                .unsafeFileSystem,
                "\(rootDirectory.path) is a directory shared with group \(group) (mode 2770) that holds no store: a private store is not created there, where the group could read it. Create it elsewhere, or ask for a store shared with that group"
            )
        case (.group(let group), let asked?):
            throw KeychainError(
                .unsafeFileSystem,
                "\(rootDirectory.path) is shared with group \(group), not with group \(asked) as asked")
        case (.owner, let asked?):
            throw KeychainError(
                .invalidParameter,
                "\(rootDirectory.path) exists as a private directory: a store shared with group \(asked) is created only in a new directory"
            )
        }
    }

    /// - Parameter sealedKey: a master key already sealed for a store that did not exist yet, and
    ///   the user it is bound to; unused when another process created the store meanwhile.
    private static func open(
        _ rootDirectory: Directory, tpm: TPMConfiguration, kind: TPMKind, durable: Bool, create: Bool,
        newStoreVersion: UInt16,
        sealedKey: (key: SecretBytes, sealed: SealedObject, boundUser: UInt32?)?, lendTPM: @escaping TPMLender,
        sharedGroup: UInt32?
    ) throws(KeychainError) -> ItemStore {
        let root = rootDirectory.path
        let lock = try rootDirectory.lockItself(timeout: tpm.timeout, purpose: "opening or creating the store")
        defer { withExtendedLifetime(lock) {} }
        let cache = StorageKeyContextFile(directory: rootDirectory)
        var opened: Unlocked
        switch try presence(in: rootDirectory) {
        case .present:
            opened = try unlock(rootDirectory, tpm: tpm, cache: cache, bind: true)
            try checkFacts(opened.facts, of: rootDirectory, openedWith: kind)
        case .absent:
            guard create else { throw storeNotFound(root) }
            try checkSharingForCreation(rootDirectory, asked: sharedGroup)
            opened = try createStore(
                in: rootDirectory, version: newStoreVersion, sealedKey: sealedKey, tpm: tpm, kind: kind, cache: cache)
        }
        let (storeID, keys, version) = (opened.storeID, opened.keys, opened.version)
        if version >= 2 {
            // What an upgrade that died after its switch left: format 2 is complete without them.
            try rootDirectory.removeTree(itemsDirectory)
            try rootDirectory.removeTree(stagingDirectory)
        }
        let layout = try layout(of: rootDirectory, version: version, keys: keys)
        // The store lock is held exclusively: no rotation is under way, so another key's
        // directories are what one left (before its commit, or after it but before its cleanup).
        if version >= 2 {
            try removeOtherKeyGenerations(in: rootDirectory, keeping: layout)
            try finishRecoveryKeyRotation(in: rootDirectory, keys: keys)
        }
        // Temp files of the store's own files that a killed writer left (the item files' are
        // removed by the next write of their group): with the store lock held exclusively, no
        // live writer owns them.
        for name in [
            StoreMetadata.fileName, RecoveryFile.fileName, RecoveryFile.nextFileName, StorageKeyContextFile.name,
        ] {
            _ = try rootDirectory.remove(name + Directory.temporarySuffix, durable: false)
        }
        if opened.counterIndex == nil {
            try refuseIfOnceProtected(opened.keys, in: rootDirectory, tpm: tpm, cache: cache)
            if version >= 2 { try addCounter(to: &opened, layout: layout, in: rootDirectory, tpm: tpm, cache: cache) }
        }
        if opened.facts == nil && version >= 2 {
            // A store from before version 6: what it is now, as this open found and authenticated
            // it, is recorded once and holds from then on. A store this open cannot write (a
            // read-only mount) is read as before, and recorded by the next open that can write.
            do {
                try recordFacts(
                    .init(tpm: kind, sharing: rootDirectory.sharing), in: &opened, rootDirectory: rootDirectory)
            } catch  where error.code == .permissionDenied || error.code == .storageFailed {
                // Renamed but not made durable: the file is the new one, and this open follows it.
                if let identity = try? rootDirectory.identity(of: StoreMetadata.fileName) {
                    opened.metadataIdentity = identity
                }
            }
        }
        var rollback: RollbackGuard.State?
        if let counterIndex = opened.counterIndex, let counterValue = try opened.counterValue {
            rollback = try loadManifest(
                rootDirectory, name: layout.manifest, keys: keys, storeID: storeID, counterIndex: counterIndex,
                counter: counterValue)
        }
        return ItemStore(
            root: rootDirectory, storeID: storeID, layout: layout, keys: keys,
            metadataIdentity: opened.metadataIdentity,
            durable: durable, lockTimeout: tpm.timeout, lendTPM: lendTPM, rollback: rollback)
    }

    /// A new store in `rootDirectory` (held locked): its master key sealed (or `sealedKey`), its
    /// rollback counter and empty manifest where the TPM can hold one, then store.meta, created
    /// exclusively, as the commit.
    private static func createStore(
        in rootDirectory: Directory, version: UInt16,
        sealedKey: (key: SecretBytes, sealed: SealedObject, boundUser: UInt32?)?,
        tpm: TPMConfiguration, kind: TPMKind, cache: StorageKeyContextFile
    ) throws(KeychainError) -> Unlocked {
        let root = rootDirectory.path
        let generated: (key: SecretBytes, sealed: SealedObject, boundUser: UInt32?)
        if let sealedKey {
            generated = sealedKey
        } else {
            let binding = version >= 2 ? newBinding(for: rootDirectory.sharing) : nil
            let made = try withTPM(tpm, root: root, cache: cache) { try generateMasterKey(binding: binding, tpm: $0) }
            generated = (made.key, made.sealed, binding == nil ? nil : UserBinding.currentUser)
        }
        let (masterKey, sealed, boundUser) = generated
        let storeID = randomBytes(16)
        let keys = masterKey.withUnsafeBytes { StoreKeys(masterKey: SymmetricKey(data: $0), storeID: storeID) }
        let counter = version >= 2 ? try defineCounterIfPossible(keys: keys, tpm: tpm, root: root, cache: cache) : nil
        if let counter {
            try writeManifest(
                Manifest.fileName, listing: nil, in: rootDirectory, keys: keys, storeID: storeID,
                counterIndex: counter.index, epoch: counter.value)
        }
        // Layout 1 exists only for tests of the upgrade from it, and has no version with facts.
        let facts =
            version >= 2 ? StoreMetadata.Facts(tpm: kind, sharing: rootDirectory.sharing, boundUser: boundUser) : nil
        let metadata = StoreMetadata(
            version: version, storeID: storeID, createdMilliseconds: StoreMetadata.now,
            sealedMasterKey: sealed, rollbackCounter: counter?.index, facts: facts)
        guard
            try rootDirectory.createExclusively(
                StoreMetadata.fileName, with: metadata.serialized(metadataKey: keys.metadata))
        else {
            if let counter { _ = try? withTPM(tpm, root: root, cache: cache) { try $0.undefineNVIndex(counter.index) } }
            throw KeychainError(
                .storageFailed, "Another process created \(root)/\(StoreMetadata.fileName) at the same time")
        }
        let identity = try metadataIdentity(in: rootDirectory, "while the store was locked")
        if version == 1 {
            guard try Directory.open(itemsDirectory, in: rootDirectory, create: true) != nil else {
                throw KeychainError(.storageFailed, "Cannot create \(root)/\(itemsDirectory)")
            }
        }
        return Unlocked(
            storeID: storeID, keys: keys, version: version, metadataIdentity: identity, counterIndex: counter?.index,
            counter: counter.map { .success($0.value) }, facts: facts)
    }

    /// The inode of the store.meta this process has just written (the way it later notices that
    /// another process replaced it).
    ///
    /// - Parameter moment: when it could have gone, for the error ("while the store was locked").
    static func metadataIdentity(in rootDirectory: Directory, _ moment: String) throws(KeychainError) -> FileIdentity {
        guard let identity = try rootDirectory.identity(of: StoreMetadata.fileName) else {
            throw KeychainError(.storageFailed, "\(rootDirectory.path)/\(StoreMetadata.fileName) disappeared \(moment)")
        }
        return identity
    }

    /// - Throws: as ``presence(at:)``.
    static func presence(in directory: Directory) throws(KeychainError) -> Presence {
        if try directory.openFile(StoreMetadata.fileName) != nil { return .present }
        let entries = try directory.entries()
        if entries.contains(where: {
            $0 == itemsDirectory || $0 == itemsV2Directory || $0.hasPrefix(itemsV2Directory + "-")
        }) {
            throw KeychainError(
                .tampered,
                "The keychain store at \(directory.path) is damaged: it holds items but its metadata (\(StoreMetadata.fileName)) is missing. Restore that file from a backup; a new store will not be created over these items, which would make them unreadable for good"
            )
        }
        let foreign = entries.filter { !entriesBeforeCreation.contains($0) }.sorted()
        guard foreign.isEmpty else {
            let shown =
                foreign.prefix(3).map { "\"\($0)\"" }.joined(separator: ", ") + (foreign.count > 3 ? ", ..." : "")
            throw KeychainError(
                .invalidParameter,
                "\(directory.path) is not a keychain store and is not empty (it holds \(shown)); a store is created only in a new or empty directory"
            )
        }
        return .absent
    }

    private static func storeNotFound(_ root: String) -> KeychainError {
        KeychainError(.storeNotFound, "No keychain store at \(root)")
    }

    static func validate(_ root: String) throws(KeychainError) {
        guard root.hasPrefix("/") else {
            throw KeychainError(.invalidParameter, "The store path must be absolute: \(root)")
        }
    }

    static func withTPM<R: Sendable>(
        _ configuration: TPMConfiguration, root: String, cache: StorageKeyContextFile?,
        _ body: (TPMConnection) throws -> R
    ) throws(KeychainError) -> R {
        do {
            let tpm = try TPMConnection(configuration, storageKeyContextCache: cache)
            defer { tpm.close() }
            return try body(tpm)
        } catch let error as KeychainError {
            throw error
        } catch let error as TPMError {
            throw KeychainError(tpmError: error, store: root)
        } catch {
            throw KeychainError(.tpmUnavailable, "The TPM failed", underlying: error)
        }
    }

    /// Missing parents are created 0700; existing ones (such as ~/.local/share) are not ours to judge.
    private static func createParents(of root: String) throws(KeychainError) {
        try Directory.createPath(String(root[..<(root.lastIndex(of: "/") ?? root.startIndex)]))
    }
}

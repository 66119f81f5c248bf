import Crypto
import FoundationEssentials
package import KeychainVocabulary
import SystemCalls
import TPM

// Rotating the master key. Every key of a store derives from its master key, and so do the names
// of its files, so a new master key means a new copy of every item and key record. The copy is
// written beside the old one, in directories named after the new key (`items2-<tag>`,
// `records-<tag>`, ``keyGenerationTag(_:)``), made durable, and then store.meta is replaced by one
// sealing the new key (version 3, which names those directories): that rename is the one atomic step. Before it, the old key and its
// directories are the store; after it, the new ones. Whatever the other generation left (a
// rotation killed before or after its commit) is removed by the next open, which holds the store
// lock exclusively, or by the rotation itself right after its commit.
//
// Other processes that have the store open notice the new store.meta (its inode and change time) when they write
// (under the store lock, shared) or miss an item (their directories are gone), unseal the new key
// and carry on. Until the old directories are removed they may still read them: the same values,
// since no write can happen between a commit and the removal.
extension ItemStore {
    /// What a rotation did.
    package struct KeyRotation: Sendable, Equatable {
        /// Items re-encrypted under the new key.
        package let items: Int
        /// Key records carried over (authenticated under the new key).
        package let records: Int
    }

    /// The key records the store's items name, with their protections: what a rotation needs
    /// opened, since a protected item's secret can only be re-encrypted by someone who can read it.
    ///
    /// - Throws: ``KeychainError`` `.tampered` for a damaged item header or record.
    package func protectionsInUse() throws(KeychainError) -> [ItemProtection] {
        try upgradeIfNeeded()
        _ = try refreshIfRotated(try current())
        let state = try current()
        var seen: Set<[UInt8]> = []
        var protections: [ItemProtection] = []
        for group in try state.layout.items.entries() where !group.hasPrefix(".") {
            guard let directory = try Directory.open(group, in: state.layout.items, create: false) else { continue }
            for name in try directory.entries() where name.hasSuffix(".item") {
                guard let file = try directory.openFile(name) else { continue }
                guard file.size >= ItemFileV2.headerSize else {
                    throw KeychainError(.tampered, "\(file.path) is truncated")
                }
                let header = try ItemFileV2.decodeHeader(
                    try file.read(count: ItemFileV2.headerSize, at: 0)[...], fileSize: file.size,
                    storeID: storeID, path: file.path)
                guard header.keyRecord != ItemFileV2.masterKeyRecord, seen.insert(header.keyRecord).inserted else {
                    continue
                }
                let record = try keyRecord(header.keyRecord, state)
                protections.append(
                    ItemProtection(
                        recordID: record.recordID, protection: try record.protection(),
                        lockBound: record.flags.contains(.lockBound)))
            }
        }
        return protections
    }

    /// Replaces the master key with a new one sealed to the TPM, and re-encrypts every item and
    /// key record under it, crash-safe (see the top of this file), holding the store lock
    /// exclusively. A format-1 store is moved to format 2 first.
    ///
    /// - Parameter recordKeys: the opened key record of every protected item
    ///   (``protectionsInUse()``); an item whose record is missing here stops the rotation before
    ///   anything is committed.
    /// - Throws: ``KeychainError`` `.interactionNotAllowed` (a protected item's record not opened),
    ///   `.tampered` (an item or record that fails authentication: nothing is committed),
    ///   `.tpmUnavailable`, `.timedOut`, `.storageFailed`.
    package func rotateMasterKey(recordKeys: [RecordKey] = []) throws(KeychainError) -> KeyRotation {
        try upgradeIfNeeded()
        let lock = try rootDirectory.lockItself(timeout: lockTimeout, purpose: "rotating its master key")
        defer { withExtendedLifetime(lock) {} }
        _ = try refreshIfRotated(try current())
        let state = try current()
        let opened = Dictionary(recordKeys.map { ($0.recordID, $0) }, uniquingKeysWith: { first, _ in first })

        let oldCounter = rollback.counterIndex
        // The new key keeps the store's binding to its user, asked for before the TPM is.
        let binding = try Self.bindingSecret(
            of: try Self.authenticatedMetadata(of: rootDirectory, keys: state.keys), root: root)
        // A protected store gets a new counter with the new key: its authorization derives from it.
        let (masterKey, sealed, counter) = try withLentTPM { (tpm) throws(KeychainError) in
            try Self.withTPM(tpm, root: root, cache: StorageKeyContextFile(directory: rootDirectory)) { connection in
                let (masterKey, sealed) = try Self.generateMasterKey(binding: binding?.bytes, tpm: connection)
                guard oldCounter != nil else { return (masterKey, sealed, nil as (index: UInt32, value: UInt64)?) }
                let keys = masterKey.withUnsafeBytes { StoreKeys(masterKey: SymmetricKey(data: $0), storeID: storeID) }
                return (masterKey, sealed, try Self.defineCounter(keys: keys, tpm: connection, store: root))
            }
        }
        let keys = masterKey.withUnsafeBytes { StoreKeys(masterKey: SymmetricKey(data: $0), storeID: storeID) }
        let tag = Self.keyGenerationTag(keys)
        let itemsName = Self.itemsV2Directory + "-" + tag
        let recordsName = KeyRecord.directoryName + "-" + tag
        // Only an earlier attempt with this very key could have left them: start afresh.
        try rootDirectory.removeTree(itemsName)
        try rootDirectory.removeTree(recordsName)
        guard let items = try Directory.open(itemsName, in: rootDirectory, create: true) else {
            throw KeychainError(.storageFailed, "Cannot create \(root)/\(itemsName)")
        }
        let target = OpenState(
            keys: keys,
            layout: Layout(version: 2, items: items, records: recordsName, manifest: Manifest.fileName + "-" + tag),
            metadataIdentity: FileIdentity(inode: 0, changed: 0))
        let copied: (items: Int, records: Int)
        do {
            copied = try copy(state, to: target, opened: opened)
            // The recovery key (if any) follows: the new master key encrypted to its public half.
            try Self.prepareRecoveryKeyRotation(
                in: rootDirectory, masterKey: masterKey, keys: keys, oldKeys: state.keys, storeID: storeID)
            if let counter {
                try Self.writeManifest(
                    target.layout.manifest, listing: target.layout, in: rootDirectory, keys: keys, storeID: storeID,
                    counterIndex: counter.index,
                    epoch: counter.value)
            }
            // The commit: store.meta now seals the new key.
            var metadata = try Self.authenticatedMetadata(of: rootDirectory, keys: state.keys)
            (metadata.version, metadata.sealedMasterKey, metadata.rollbackCounter) = (
                StoreMetadata.rotatedVersion, sealed, counter?.index
            )
            try rootDirectory.replace(
                StoreMetadata.fileName, with: metadata.serialized(metadataKey: keys.metadata), durable: true)
            OperationProgress.report(.committed)
        } catch {
            // Not committed (store.meta is still the file the old key came from): the old key and
            // its files are the store, and the copy goes now rather than at the next open. If the
            // rename did happen (only the directory's fsync failed), the new key is in charge and
            // its files must stay: this process and others follow it as after any rotation.
            if (try? rootDirectory.identity(of: StoreMetadata.fileName)) == state.metadataIdentity {
                _ = try? rootDirectory.removeTree(itemsName)
                _ = try? rootDirectory.removeTree(recordsName)
                _ = try? rootDirectory.remove(RecoveryFile.nextFileName, durable: false)
                _ = try? rootDirectory.remove(target.layout.manifest, durable: false)
                if let counter { undefineCounter(counter.index) }
            }
            throw error
        }
        let identity = try Self.metadataIdentity(in: rootDirectory, "after the key rotation")
        let rotated = OpenState(keys: keys, layout: target.layout, metadataIdentity: identity)
        adopt(rotated)
        if let counter {
            let reloaded = try Self.loadManifest(
                rootDirectory, name: target.layout.manifest, keys: keys, storeID: storeID,
                counterIndex: counter.index, counter: counter.value)
            rollback.replace(with: reloaded)
            if let oldCounter { undefineCounter(oldCounter) }
        }
        try Self.finishRecoveryKeyRotation(in: rootDirectory, keys: keys)
        try Self.removeOtherKeyGenerations(in: rootDirectory, keeping: rotated.layout)
        return KeyRotation(items: copied.items, records: copied.records)
    }

    /// Writes every key record and item of `state` under `target`'s key and directories, each
    /// file durable and each directory synced once. - Returns: how many items and records.
    private func copy(
        _ state: OpenState, to target: OpenState, opened: [[UInt8]: RecordKey]
    ) throws(KeychainError) -> (items: Int, records: Int) {
        guard let records = try Directory.open(target.layout.records, in: rootDirectory, create: true) else {
            throw KeychainError(.storageFailed, "Cannot create \(root)/\(target.layout.records)")
        }
        let carried = try allRecords(state)
        for record in carried {
            try records.replace(
                KeyRecord.fileName(record.recordID), with: record.serialized(metadataKey: target.keys.metadata),
                durable: durable, syncDirectory: false)
        }
        var groups: [String: Directory] = [:]
        var count = 0
        for group in try state.layout.items.entries() where !group.hasPrefix(".") {
            guard let directory = try Directory.open(group, in: state.layout.items, create: false) else { continue }
            for name in try directory.entries() where name.hasSuffix(".item") {
                guard let file = try directory.openFile(name) else { continue }
                let (contents, record) = try rotatedContents(
                    of: file, named: name, inGroup: group, opened: opened, state)
                let groupName = ItemFileV2.groupName(of: contents.itemClass, contents.attributes, keys: target.keys)
                if groups[groupName] == nil {
                    groups[groupName] = try Directory.open(groupName, in: target.layout.items, create: true)
                }
                guard let destination = groups[groupName] else {
                    throw KeychainError(.storageFailed, "Cannot create \(target.layout.items.path)/\(groupName)")
                }
                try destination.replace(
                    ItemFileV2.fileName(of: contents.itemClass, contents.attributes, keys: target.keys),
                    with: try encode(contents, record: record, target), durable: durable, syncDirectory: false)
                count += 1
                OperationProgress.report(.rewrote(count))
            }
        }
        if durable {
            for directory in groups.values { try directory.sync() }
            try target.layout.items.sync()
            try records.sync()
            try rootDirectory.sync()
        }
        return (count, carried.count)
    }

    /// One item, decrypted under the current key and checked to be where its name says, with the
    /// record its secret is bound to (nil: the master key).
    private func rotatedContents(
        of file: OpenFile, named name: String, inGroup group: String, opened: [[UInt8]: RecordKey],
        _ state: OpenState
    ) throws(KeychainError) -> (ItemFileV2.Contents, KeyRecord?) {
        let bytes = try readWhole(file, version: 2)
        let header = try ItemFileV2.decodeHeader(bytes[...], fileSize: bytes.count, storeID: storeID, path: file.path)
        let attributes = try ItemFileV2.decryptAttributes(
            bytes[header.attributesRange], header: header, key: v2ItemKey(header, state.keys),
            path: file.path)
        guard ItemFileV2.fileName(of: header.itemClass, attributes, keys: state.keys) == name,
            ItemFileV2.groupName(of: header.itemClass, attributes, keys: state.keys) == group
        else {
            throw KeychainError(.tampered, "\(file.path) holds another item: it was swapped or renamed")
        }
        var record: KeyRecord?
        var recordKey: RecordKey?
        if header.keyRecord != ItemFileV2.masterKeyRecord {
            guard let key = opened[header.keyRecord] else {
                throw KeychainError(
                    .interactionNotAllowed,
                    "\(file.path) is a protected item: rotating the master key needs its key record opened (an authentication context that may ask for biometry or the passcode)"
                )
            }
            record = try keyRecord(header.keyRecord, state)
            recordKey = key
        }
        let contents = try readContents(
            bytes, path: file.path, expectedPrimaryKey: header.itemClass.encodedPrimaryKey(of: attributes),
            recordKey: recordKey, state)
        return (contents, record)
    }
}

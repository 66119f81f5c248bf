import Crypto
import FoundationEssentials
import KeychainVocabulary
import SystemCalls

#if canImport(Glibc)
import Glibc
#endif

// Which format a store's items are in, and the move from format 1 to format 2: the first write
// to a format-1 store rewrites every item into `items2.tmp/`, makes it durable, renames it to
// `items2/`, switches store.meta to version 2 (the one atomic step), then removes `items/`.
// store.meta's version is the truth: a crash before the switch leaves format 1 intact, after it
// format 2 complete. Everything runs under the store lock held exclusively; writers hold it shared.
extension ItemStore {
    static let itemsDirectory = "items"
    static let itemsV2Directory = "items2"
    static let stagingDirectory = "items2.tmp"

    /// The current state, after adopting an upgrade another process made: a format-1 layout
    /// whose `items/` was removed has been replaced. Costs one fstat, and only for format 1.
    func currentFollowingUpgrades() throws(KeychainError) -> OpenState {
        let state = try current()
        guard state.layout.version == 1, try !state.layout.items.revalidate() else { return state }
        try reloadLayout(state.keys)
        return try current()
    }

    /// Runs a write: upgrades a format-1 store first, then holds the store lock shared while `body` runs.
    /// A rollback-protected store starts an epoch first (``startEpochIfNeeded()``), unless
    /// `startingEpoch` is false: the caller holds a TPM connection, and a second would wait for it.
    func withWriteAccess<R>(
        startingEpoch: Bool = true, _ body: (OpenState) throws(KeychainError) -> R
    ) throws(KeychainError) -> R {
        try upgradeIfNeeded()
        let lock = try lockStoreForWriting()
        defer { unlockStore(lock) }
        if try refreshIfRotated(try current()) {
            // A rotation committed; its cleanup may not have run (it was killed): remove the old
            // key's directories before writing, so no reader that still uses them sees an old value.
            try Self.removeOtherKeyGenerations(in: rootDirectory, keeping: try current().layout)
        }
        if startingEpoch { try startEpochIfNeeded() }
        return try body(currentFollowingUpgrades())
    }

    /// Reads store.meta again (authenticated with the store's own key) and adopts the layout of
    /// the version it names.
    func reloadLayout(_ keys: StoreKeys) throws(KeychainError) {
        let version = try Self.readVersion(of: rootDirectory, keys: keys, storeID: storeID)
        adopt(try Self.layout(of: rootDirectory, version: version, keys: keys))
    }

    /// The version store.meta names, after checking its MAC.
    static func readVersion(
        of rootDirectory: Directory, keys: StoreKeys, storeID: [UInt8]
    ) throws(KeychainError) -> UInt16 {
        try authenticatedMetadata(of: rootDirectory, keys: keys, storeID: storeID).version
    }

    /// store.meta as it is now, authenticated with `keys` and checked to be the store `storeID`'s
    /// (when given): what every rewrite of it (upgrade, rotation, recovery key) starts from.
    ///
    /// - Throws: ``KeychainError`` `.tampered` when it is missing, damaged, of another key or of another store.
    static func authenticatedMetadata(
        of rootDirectory: Directory, keys: StoreKeys, storeID: [UInt8]? = nil
    ) throws(KeychainError) -> StoreMetadata {
        let path = rootDirectory.path + "/" + StoreMetadata.fileName
        guard let file = try rootDirectory.openFile(StoreMetadata.fileName), file.size <= StoreMetadata.maximumFileSize
        else {
            throw KeychainError(.tampered, "\(path) is missing or damaged")
        }
        let parsed = try StoreMetadata.parse(try file.read(count: file.size, at: 0), path: path)
        try parsed.verify(metadataKey: keys.metadata)
        if let storeID, parsed.metadata.storeID != storeID {
            throw KeychainError(.tampered, "\(path) now belongs to another store")
        }
        return parsed.metadata
    }

    /// Moves a format-1 store to format 2, once, crash-safe (see the top of this file).
    ///
    /// - Throws: ``KeychainError`` `.tampered` when an item cannot be read (the store stays in
    ///   format 1, untouched), `.timedOut`, `.storageFailed`.
    func upgradeIfNeeded() throws(KeychainError) {
        guard try current().layout.version == 1 else { return }
        let lock = try rootDirectory.lockItself(timeout: lockTimeout, purpose: "moving it to format 2")
        defer { withExtendedLifetime(lock) {} }
        let state = try current()
        if try Self.readVersion(of: rootDirectory, keys: state.keys, storeID: storeID) >= 2 {
            return try reloadLayout(state.keys) // another process did it while we waited
        }
        // Leftovers of an upgrade that died before its switch: format 1 is still the truth.
        try rootDirectory.removeTree(Self.stagingDirectory)
        try rootDirectory.removeTree(Self.itemsV2Directory)
        guard let staging = try Directory.open(Self.stagingDirectory, in: rootDirectory, create: true) else {
            throw KeychainError(.storageFailed, "Cannot create \(root)/\(Self.stagingDirectory)")
        }
        let target = OpenState(
            keys: state.keys, layout: Layout(version: 2, items: staging), metadataIdentity: state.metadataIdentity)
        var groups: [String: Directory] = [:]
        var rewritten = 0
        for groupName in try state.layout.items.entries() {
            guard let group = try Directory.open(groupName, in: state.layout.items, create: false) else { continue }
            for name in try group.entries() where name.hasSuffix(".item") {
                guard let file = try group.openFile(name) else { continue }
                let contents = try v1Contents(of: file, named: name, inGroup: groupName, state)
                let identity = try ItemIdentity(checkedAttributes: contents.attributes, path: file.path)
                let names = names(identity, target)
                if groups[names.group] == nil {
                    groups[names.group] = try Directory.open(names.group, in: staging, create: true)
                }
                guard let directory = groups[names.group] else {
                    throw KeychainError(.storageFailed, "Cannot create \(staging.path)/\(names.group)")
                }
                // Each file is made durable; each directory once, below.
                try directory.replace(
                    names.file, with: try encode(contents, target), durable: true, syncDirectory: false)
                rewritten += 1
                OperationProgress.report(.rewrote(rewritten))
            }
        }
        for directory in groups.values { try directory.sync() }
        try staging.sync()
        do {
            try retryingInterrupts {
                renameat(
                    rootDirectory.descriptor, Self.stagingDirectory, rootDirectory.descriptor, Self.itemsV2Directory)
            }
        } catch {
            throw KeychainError(
                .storageFailed, "Cannot rename \(staging.path) to \(Self.itemsV2Directory)", underlying: error)
        }
        try rootDirectory.sync()
        try Self.rewriteMetadata(of: rootDirectory, version: 2, keys: state.keys)
        OperationProgress.report(.committed)
        // Format 2 is now the truth; items/ is garbage, removed again at the next open if this fails.
        _ = try? rootDirectory.removeTree(Self.itemsDirectory)
        forgetCaches()
        try reloadLayout(state.keys)
    }

    /// A format-1 item as format-2 contents (same ID, generation, dates, class and value),
    /// checked to be the item its name and group say.
    private func v1Contents(
        of file: OpenFile, named name: String, inGroup groupName: String,
        _ state: OpenState
    ) throws(KeychainError) -> ItemFileV2.Contents {
        let read = try formatOne(file, withSecret: true, state)
        let (header, attributes) = (read.header, read.attributes)
        let names = names(ItemIdentity(checked: attributes), state)
        guard names.file == name, names.group == groupName, let value = read.value else {
            throw KeychainError(.tampered, "\(file.path) holds another item: it was swapped or renamed")
        }
        let list = AttributeList(formatOne: attributes)
        return ItemFileV2.Contents(
            itemID: header.itemID, generation: header.generation, itemClass: .genericPassword,
            keyRecord: ItemFileV2.masterKeyRecord, accessibility: header.accessibility, kind: value.kind,
            attributes: list, value: value.bytes)
    }

    /// Replaces store.meta with the same store at another version (a new MAC over the new bytes).
    static func rewriteMetadata(of rootDirectory: Directory, version: UInt16, keys: StoreKeys) throws(KeychainError) {
        var metadata = try authenticatedMetadata(of: rootDirectory, keys: keys)
        metadata.version = version
        try rootDirectory.replace(
            StoreMetadata.fileName, with: metadata.serialized(metadataKey: keys.metadata), durable: true)
    }

    /// Where the items and records are for store.meta `version`, under `keys`: version 1 in
    /// `items/`; version 2 in `items2/` and `records/`; version 3 (after a key rotation) in the
    /// directories named after the key (``keyGenerationTag(_:)``). Versions 2 and 3 hold item format 2.
    ///
    /// - Throws: ``KeychainError`` `.tampered` when the directories store.meta names are missing and
    ///   another key's are there: store.meta was replaced by a copy from another side of a rotation.
    static func layout(of rootDirectory: Directory, version: UInt16, keys: StoreKeys) throws(KeychainError) -> Layout {
        if version == 1 {
            guard let items = try Directory.open(itemsDirectory, in: rootDirectory, create: false) else {
                throw KeychainError(.tampered, "\(rootDirectory.path)/\(itemsDirectory) is missing")
            }
            return Layout(version: 1, items: items)
        }
        let replaced = KeychainError(
            .tampered,
            "The keychain store at \(rootDirectory.path) holds items under another master key than its \(StoreMetadata.fileName) seals: that file was replaced by a copy from before or after a key rotation. Put back the one that belongs with the items (from the same backup)"
        )
        if version >= StoreMetadata.rotatedVersion {
            let tag = keyGenerationTag(keys)
            guard let items = try Directory.open(itemsV2Directory + "-" + tag, in: rootDirectory, create: false) else {
                throw replaced
            }
            return Layout(
                version: 2, items: items, records: KeyRecord.directoryName + "-" + tag,
                manifest: Manifest.fileName + "-" + tag)
        }
        let entries = try rootDirectory.entries()
        if !entries.contains(itemsV2Directory), entries.contains(where: { $0.hasPrefix(itemsV2Directory + "-") }) {
            throw replaced
        }
        guard let items = try Directory.open(itemsV2Directory, in: rootDirectory, create: true) else {
            throw KeychainError(.storageFailed, "Cannot create \(rootDirectory.path)/\(itemsV2Directory)")
        }
        return Layout(version: 2, items: items)
    }

    /// 64 bits of the names key, in hex: names a master key's directories without revealing anything about it.
    static func keyGenerationTag(_ keys: StoreKeys) -> String {
        String(keys.name("TPMKeychain key generation", encoded: []).prefix(16))
    }
}

extension ItemIdentity {
    /// The identity of decrypted attributes, validated again (a format-1 file from before the
    /// current limits must still name a valid item to be moved).
    init(checkedAttributes attributes: AttributeList, path: String) throws(KeychainError) {
        do {
            try self.init(
                accessGroup: attributes.string(AttributeTag.accessGroup) ?? "",
                service: attributes.string(AttributeTag.service) ?? "",
                account: attributes.string(AttributeTag.account) ?? "")
        } catch {
            throw KeychainError(.tampered, "\(path) names no valid item", underlying: error)
        }
    }
}

extension AttributeList {
    /// A format-1 item's attributes as format 2 tags them. Format 1 kept whole milliseconds,
    /// which are exact as nanoseconds.
    init(formatOne attributes: ItemAttributes) {
        self.init(ItemIdentity(checked: attributes))
        setString(attributes.label, for: AttributeTag.label)
        setString(attributes.comment, for: AttributeTag.comment)
        self[AttributeTag.generic] = attributes.genericData.map { Array($0) }
        for (tag, date) in [
            (AttributeTag.creationDate, attributes.creationDate),
            (AttributeTag.modificationDate, attributes.modificationDate),
        ] {
            setNanoseconds(Int64((date.timeIntervalSince1970 * 1000).rounded()) * 1_000_000, for: tag)
        }
    }
}

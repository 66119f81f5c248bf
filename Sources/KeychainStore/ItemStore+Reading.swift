import Crypto
import FoundationEssentials
package import KeychainVocabulary
import SystemCalls
import TPM
import WireFormat

#if canImport(Glibc)
import Glibc
#endif

// The read path: every read of one item, by identity or by class and primary key, goes through
// ``readItem(_:of:_:recordKey:_:)``: its file opened once (a miss confirmed as one), its header
// decoded once, the sections the caller needs decrypted, and the generation checked against the
// rollback guard once. Readers take no lock: files are replaced by rename, so a reader sees the
// old item or the new one. Format 1 is read by its one reader, ItemFileV1+Reading.swift.
extension ItemStore {
    /// The item with its secret, or nil when there is none.
    ///
    /// - Throws: ``KeychainError`` `.tampered` (never wrong data), `.unsafeFileSystem`, `.storageFailed`.
    package func item(_ identity: ItemIdentity, recordKey: RecordKey? = nil) throws(KeychainError) -> ItemRecord? {
        try readFollowingRotation { (state) throws(KeychainError) in
            guard
                let read = try readItem(
                    names(identity, state), of: .genericPassword, [.attributes, .secret], recordKey: recordKey, state)
            else { return nil }
            return ItemRecord(
                itemID: read.itemID, generation: read.generation, attributes: try read.itemAttributes(),
                value: ItemValue(kind: read.kind, bytes: read.secret ?? []))
        }
    }

    /// Only the item's secret, or nil when there is none: one authenticated decryption, no attributes.
    ///
    /// - Throws: ``KeychainError`` `.tampered` (also for a file of another item), `.unsafeFileSystem`, `.storageFailed`.
    package func value(_ identity: ItemIdentity, recordKey: RecordKey? = nil) throws(KeychainError) -> ItemValue? {
        try readFollowingRotation { (state) throws(KeychainError) in
            try readItem(names(identity, state), of: .genericPassword, .secret, recordKey: recordKey, state).map {
                ItemValue(kind: $0.kind, bytes: $0.secret ?? [])
            }
        }
    }

    /// The item's attributes, read and authenticated without decrypting the secret.
    package func attributes(_ identity: ItemIdentity) throws(KeychainError) -> ItemAttributes? {
        try readFollowingRotation { (state) throws(KeychainError) in
            try readItem(names(identity, state), of: .genericPassword, .attributes, state)?.itemAttributes()
        }
    }

    /// The one read of an item: its file opened by `names` (a miss confirmed as one), the header
    /// decoded and checked to be of `itemClass`, the `parts` decrypted and authenticated against
    /// the identity `names` encodes, then the generation checked against the rollback guard.
    ///
    /// - Returns: nil when there is no item (or only what an interrupted delete left).
    /// - Throws: ``KeychainError`` `.tampered` (a file of another item or class, a failed
    ///   authentication), `.rolledBack`, `.interactionNotAllowed` (a protected secret without
    ///   its record's key), `.unsafeFileSystem`, `.storageFailed`.
    func readItem(
        _ names: ItemNames, of itemClass: ItemClass, _ parts: ReadParts, recordKey: RecordKey? = nil,
        _ state: OpenState
    ) throws(KeychainError) -> ReadItem? {
        guard let file = try openItem(names, state) else { return try confirmAbsence(names, state) }
        let wantsSecret = !parts.isDisjoint(with: [.secret, .unprotectedSecret])
        if names.version == 1 {
            let read = try formatOne(file, withSecret: wantsSecret, state)
            guard ItemFileV1.encode(ItemIdentity(checked: read.attributes)) == names.encodedIdentity else {
                throw Self.swapped(file.path)
            }
            return ReadItem(read, path: file.path)
        }
        guard file.size >= ItemFileV2.headerSize, file.size <= ItemFileV2.maximumFileSize else {
            throw KeychainError(.tampered, "\(file.path) has an impossible size (\(file.size) bytes)")
        }
        // One system call for the whole file when the secret is wanted; else header and attributes.
        let bytes = try file.read(count: wantsSecret ? file.size : ItemFileV2.headerSize, at: 0)
        let header = try ItemFileV2.decodeHeader(bytes[...], fileSize: file.size, storeID: storeID, path: file.path)
        guard header.itemClass == itemClass else { throw Self.swapped(file.path) }
        var read = ReadItem(header, path: file.path)
        if parts.contains(.attributes) {
            let sealed =
                wantsSecret
                ? bytes[header.attributesRange]
                : try file.read(count: header.attributesRange.count, at: header.attributesRange.lowerBound)[...]
            let list = try ItemFileV2.decryptAttributes(
                sealed, header: header, key: v2ItemKey(header, state.keys), path: file.path)
            guard itemClass.encodedPrimaryKey(of: list) == names.encodedIdentity else { throw Self.swapped(file.path) }
            read.attributes = list
        }
        if parts.contains(.secret)
            || (parts.contains(.unprotectedSecret) && header.keyRecord == ItemFileV2.masterKeyRecord)
        {
            // The primary key is the secret's AAD: a file of another item fails here.
            read.secret = try ItemFileV2.decryptSecret(
                of: bytes, header: header, key: v2SecretKey(header, state, recordKey: recordKey),
                primaryKey: names.encodedIdentity, path: file.path)
        }
        // After authentication: the generation checked is the one the header really has.
        guard
            try checkGeneration(
                header.generation, file: names.file, key: names.manifestKey, group: names.group, path: file.path,
                in: state.layout.items)
        else { return nil }
        return read
    }

    /// A format-1 file read by its one reader, with this store's item keys.
    func formatOne(_ file: OpenFile, withSecret: Bool, _ state: OpenState) throws(KeychainError) -> ItemFileV1.Read {
        try ItemFileV1.read(
            fileSize: file.size, storeID: storeID, path: file.path, withSecret: withSecret,
            read: { (count, offset) throws(KeychainError) in try file.read(count: count, at: offset) },
            key: { v1ItemKey($0, state.keys) })
    }

    static func swapped(_ path: String) -> KeychainError {
        KeychainError(.tampered, "\(path) holds another item: it was swapped or renamed")
    }

    /// The attributes of every generic password of a service (and access group, empty for
    /// none), in creation order.
    package func list(service: String, accessGroup: String) throws(KeychainError) -> [ItemAttributes] {
        var matching = AttributeList()
        matching.setString(service, for: AttributeTag.service)
        if !accessGroup.isEmpty { matching.setString(accessGroup, for: AttributeTag.accessGroup) }
        // A query without an access group matches every group's items: those of none are kept
        // before their attributes are built, not filtered from the built list.
        return try genericPasswords(ItemQuery(itemClass: .genericPassword, matching: matching, synchronizable: .any)) {
            accessGroup.isEmpty ? ($0.string(AttributeTag.accessGroup) ?? "").isEmpty : true
        }
    }

    /// The attributes of every generic password in the store, in creation order.
    package func listAll() throws(KeychainError) -> [ItemAttributes] {
        try genericPasswords(ItemQuery(itemClass: .genericPassword, synchronizable: .any)) { _ in true }
    }

    private func genericPasswords(
        _ query: ItemQuery, keeping keep: (AttributeList) -> Bool
    ) throws(KeychainError) -> [ItemAttributes] {
        let found = try self.query(query)
        // Sized once: grown by doubling, a list of 10,000 would be copied a dozen times, each
        // time into fresh pages the kernel faults in and zeroes.
        var result: [ItemAttributes] = []
        result.reserveCapacity(found.count)
        for item in found where keep(item.attributes) {
            result.append(try ItemAttributes(item.attributes, accessibility: item.accessibility, path: root))
        }
        return result
    }

    /// Makes a miss trustworthy: an item file renamed away, or a group directory swapped with
    /// another, would otherwise read as "not found" while a listing reports tampering. The
    /// directory is checked once (every item read, as a listing does) and then only again after
    /// it changed, so repeated misses cost one fstat.
    ///
    /// - Returns: nil, when the item is genuinely absent.
    /// - Throws: ``KeychainError`` `.tampered` when the directory holds misplaced items.
    ///
    /// In a rollback-protected store, an item the manifest lists is not absent: its file was
    /// deleted behind the keychain's back (``KeychainError/Code/rolledBack``).
    func confirmAbsence<T>(
        _ names: ItemNames, _ state: OpenState, groupLocked: Bool = false
    ) throws(KeychainError) -> T? {
        if let directory = try groupDirectory(names.group, create: false, state),
            try groupDirectories.consistentStamp(names.group) != directory.stamp()
        {
            _ = try scan(groups: [names.group], state, groupLocked: groupLocked)
        }
        if names.version == 2 {
            try checkAbsence(file: names.file, group: names.group, in: state.layout.items, groupLocked: groupLocked)
        }
        return nil
    }

    /// The decrypted contents of a format-2 file that must be the item `expectedPrimaryKey` names;
    /// without `withSecret` the value is left empty (the secret section is not decrypted).
    func readContents(
        _ bytes: [UInt8], path: String, expectedPrimaryKey: [UInt8], withSecret: Bool = true,
        recordKey: RecordKey? = nil, writtenAs fileName: String? = nil, _ state: OpenState
    ) throws(KeychainError) -> ItemFileV2.Contents {
        let header = try ItemFileV2.decodeHeader(bytes[...], fileSize: bytes.count, storeID: storeID, path: path)
        let sealed = bytes[header.attributesRange]
        let attributes: AttributeList
        let written = fileName.flatMap { decryptions.written($0) }
        if let written, written.holds(header: header.bytes, sealed: sealed) {
            // Byte for byte what this process sealed, under the same key, nonce and AAD: it
            // decrypts to the attributes that were sealed.
            attributes = written.attributes
        } else {
            attributes = try ItemFileV2.decryptAttributes(
                sealed, header: header, key: v2ItemKey(header, state.keys), path: path)
        }
        let primaryKey = header.itemClass.encodedPrimaryKey(of: attributes)
        guard primaryKey == expectedPrimaryKey else {
            throw KeychainError(.tampered, "\(path) holds another item: it was swapped or renamed")
        }
        let value =
            withSecret
            ? try ItemFileV2.decryptSecret(
                of: bytes, header: header, key: v2SecretKey(header, state, recordKey: recordKey),
                primaryKey: primaryKey, path: path) : []
        return ItemFileV2.Contents(
            itemID: header.itemID, generation: header.generation, itemClass: header.itemClass,
            keyRecord: header.keyRecord, accessibility: header.accessibility, kind: header.kind,
            attributes: attributes, value: value)
    }

    func readWhole(_ file: OpenFile, version: UInt16) throws(KeychainError) -> [UInt8] {
        let (minimum, maximum) =
            version == 1
            ? (ItemFileV1.headerSize, ItemFileV1.maximumFileSize)
            : (ItemFileV2.headerSize, ItemFileV2.maximumFileSize)
        guard file.size >= minimum, file.size <= maximum else {
            throw KeychainError(.tampered, "\(file.path) has an impossible size (\(file.size) bytes)")
        }
        return try file.read(count: file.size, at: 0)
    }

    func v1ItemKey(_ header: ItemFileV1.Header, _ keys: StoreKeys) -> SymmetricKey {
        itemKey(salt: header.salt[...]) { keys.itemKey(salt: header.salt, storeID: header.storeID) }
    }

    func v2ItemKey(_ header: ItemFileV2.Header, _ keys: StoreKeys) -> SymmetricKey {
        // Only the master key record exists yet; the key records of access control come with it.
        itemKey(salt: header.salt) {
            ItemFileV2.itemKey(
                parent: keys.items, salt: header.salt, storeID: header.storeID, keyRecord: header.keyRecord)
        }
    }
}

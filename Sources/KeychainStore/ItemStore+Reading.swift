import Crypto
import FoundationEssentials
package import KeychainVocabulary
import SystemCalls
import TPM
import WireFormat

#if canImport(Glibc)
import Glibc
#endif

// The read path: lookups, listings, and the checks that make a miss trustworthy. Readers take no
// lock: files are replaced by rename, so a reader sees the old item or the new one. Every
// function reads format 1 or format 2, as the store's layout says.
extension ItemStore {
    /// The item with its secret, or nil when there is none.
    ///
    /// - Throws: ``KeychainError`` `.tampered` (never wrong data), `.unsafeFileSystem`, `.storageFailed`.
    package func item(_ identity: ItemIdentity, recordKey: RecordKey? = nil) throws(KeychainError) -> ItemRecord? {
        try readFollowingRotation { (state) throws(KeychainError) in try item(identity, recordKey: recordKey, state) }
    }

    private func item(
        _ identity: ItemIdentity, recordKey: RecordKey?, _ state: OpenState
    ) throws(KeychainError) -> ItemRecord? {
        guard let (names, file, bytes) = try readItemFile(identity, state) else { return nil }
        if names.version == 1 {
            let header = try v1Header(of: bytes, file)
            let key = v1ItemKey(header, state.keys)
            let attributes = try ItemFileV1.decryptAttributes(
                bytes[header.attributesRange], header: header, key: key,
                expected: identity, path: file.path)
            let value = try ItemFileV1.decryptSecret(
                of: bytes, header: header, key: key, encodedIdentity: names.encodedIdentity,
                path: file.path)
            return ItemRecord(
                itemID: header.itemID, generation: header.generation, attributes: attributes, value: value)
        }
        let contents = try readContents(
            bytes, path: file.path, expectedPrimaryKey: names.encodedIdentity, recordKey: recordKey, state)
        guard
            try checkGeneration(
                contents.generation, file: names.file, key: names.manifestKey, group: names.group, path: file.path,
                in: state.layout.items)
        else {
            return nil
        }
        return ItemRecord(
            itemID: contents.itemID, generation: contents.generation,
            attributes: try ItemAttributes(contents.attributes, accessibility: contents.accessibility, path: file.path),
            value: ItemValue(kind: contents.kind, bytes: contents.value))
    }

    /// The item's names, open file and bytes; nil when it is absent (a miss confirmed as such).
    private func readItemFile(
        _ identity: ItemIdentity, _ state: OpenState
    ) throws(KeychainError) -> (ItemNames, OpenFile, [UInt8])? {
        let names = names(identity, state)
        guard let file = try openItem(names, state) else {
            _ = try confirmAbsence(names, state) as ItemValue?
            return nil
        }
        return (names, file, try readWhole(file, version: names.version))
    }

    private func v1Header(of bytes: [UInt8], _ file: OpenFile) throws(KeychainError) -> ItemFileV1.Header {
        try ItemFileV1.decodeHeader(
            bytes[0..<ItemFileV1.headerSize], fileSize: file.size, storeID: storeID, path: file.path)
    }

    /// Only the item's secret, or nil when there is none: one authenticated decryption, no attributes.
    ///
    /// - Throws: ``KeychainError`` `.tampered` (also for a file of another item), `.unsafeFileSystem`, `.storageFailed`.
    package func value(_ identity: ItemIdentity, recordKey: RecordKey? = nil) throws(KeychainError) -> ItemValue? {
        try readFollowingRotation { (state) throws(KeychainError) in try value(identity, recordKey: recordKey, state) }
    }

    private func value(
        _ identity: ItemIdentity, recordKey: RecordKey?, _ state: OpenState
    ) throws(KeychainError) -> ItemValue? {
        guard let (names, file, bytes) = try readItemFile(identity, state) else { return nil }
        if names.version == 1 {
            let header = try v1Header(of: bytes, file)
            return try ItemFileV1.decryptSecret(
                of: bytes, header: header, key: v1ItemKey(header, state.keys),
                encodedIdentity: names.encodedIdentity, path: file.path)
        }
        let header = try ItemFileV2.decodeHeader(bytes[...], fileSize: bytes.count, storeID: storeID, path: file.path)
        guard header.itemClass == .genericPassword else {
            throw KeychainError(.tampered, "\(file.path) holds another item: it was swapped or renamed")
        }
        let secret = try ItemFileV2.decryptSecret(
            of: bytes, header: header, key: v2SecretKey(header, state, recordKey: recordKey),
            primaryKey: names.encodedIdentity, path: file.path)
        // After authentication: the generation checked is the one the header really has.
        guard
            try checkGeneration(
                header.generation, file: names.file, key: names.manifestKey, group: names.group, path: file.path,
                in: state.layout.items)
        else {
            return nil
        }
        return ItemValue(kind: header.kind, bytes: secret)
    }

    /// The item's attributes, read and authenticated without decrypting the secret.
    package func attributes(_ identity: ItemIdentity) throws(KeychainError) -> ItemAttributes? {
        try readFollowingRotation { (state) throws(KeychainError) in try attributes(identity, state) }
    }

    private func attributes(_ identity: ItemIdentity, _ state: OpenState) throws(KeychainError) -> ItemAttributes? {
        let names = names(identity, state)
        guard let file = try openItem(names, state) else { return try confirmAbsence(names, state) }
        let (attributes, primaryKey, generation) = try readAttributes(file, state)
        if let generation,
            try !checkGeneration(
                generation, file: names.file, group: names.group, path: file.path, in: state.layout.items)
        {
            return nil
        }
        if let primaryKey, primaryKey != names.encodedIdentity {
            throw KeychainError(.tampered, "\(file.path) holds another item: it was swapped or renamed")
        }
        if primaryKey == nil, ItemIdentity(checked: attributes) != identity {
            throw KeychainError(.tampered, "\(file.path) holds another item: it was swapped or renamed")
        }
        return attributes
    }

    /// The attributes of every generic password of a service (and access group, empty for
    /// none), in creation order.
    package func list(service: String, accessGroup: String) throws(KeychainError) -> [ItemAttributes] {
        var matching = AttributeList()
        matching.setString(service, for: AttributeTag.service)
        if !accessGroup.isEmpty { matching.setString(accessGroup, for: AttributeTag.accessGroup) }
        return try genericPasswords(ItemQuery(itemClass: .genericPassword, matching: matching, synchronizable: .any))
            .filter { $0.accessGroupName == accessGroup }
    }

    /// The attributes of every generic password in the store, in creation order.
    package func listAll() throws(KeychainError) -> [ItemAttributes] {
        try genericPasswords(ItemQuery(itemClass: .genericPassword, synchronizable: .any))
    }

    private func genericPasswords(_ query: ItemQuery) throws(KeychainError) -> [ItemAttributes] {
        var result: [ItemAttributes] = []
        for found in try self.query(query) {
            result.append(try ItemAttributes(found.attributes, accessibility: found.accessibility, path: root))
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

    /// The header and attributes of an item, authenticated, without touching the secret section;
    /// for format 2 also the primary key its attributes give (a generic password's, or an error).
    func readAttributes(
        _ file: OpenFile, _ state: OpenState
    ) throws(KeychainError) -> (ItemAttributes, [UInt8]?, UInt64?) {
        if state.layout.version == 1 {
            return (try formatOneHeaderAndAttributes(file, state).attributes, nil, nil)
        }
        guard file.size >= ItemFileV2.headerSize, file.size <= ItemFileV2.maximumFileSize else {
            throw KeychainError(.tampered, "\(file.path) has an impossible size (\(file.size) bytes)")
        }
        let header = try ItemFileV2.decodeHeader(
            try file.read(count: ItemFileV2.headerSize, at: 0)[...], fileSize: file.size,
            storeID: storeID, path: file.path)
        guard header.itemClass == .genericPassword else {
            throw KeychainError(
                .tampered, "\(file.path) holds an item of another class where a generic password belongs")
        }
        let sealed = try file.read(count: header.attributesRange.count, at: header.attributesRange.lowerBound)
        let list = try ItemFileV2.decryptAttributes(
            sealed[...], header: header, key: v2ItemKey(header, state.keys), path: file.path)
        return (
            try ItemAttributes(list, accessibility: header.accessibility, path: file.path),
            header.itemClass.encodedPrimaryKey(of: list), header.generation
        )
    }

    /// A format-1 file's header and authenticated attributes, without its secret.
    func formatOneHeaderAndAttributes(
        _ file: OpenFile, _ state: OpenState
    ) throws(KeychainError)
        -> (header: ItemFileV1.Header, attributes: ItemAttributes)
    {
        guard file.size >= ItemFileV1.headerSize, file.size <= ItemFileV1.maximumFileSize else {
            throw KeychainError(.tampered, "\(file.path) has an impossible size (\(file.size) bytes)")
        }
        let header = try ItemFileV1.decodeHeader(
            try file.read(count: ItemFileV1.headerSize, at: 0)[...], fileSize: file.size,
            storeID: storeID, path: file.path)
        let sealed = try file.read(count: header.attributesRange.count, at: header.attributesRange.lowerBound)
        return (
            header,
            try ItemFileV1.decryptAttributes(
                sealed[...], header: header, key: v1ItemKey(header, state.keys), expected: nil,
                path: file.path)
        )
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

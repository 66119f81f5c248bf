import Crypto
import FoundationEssentials
package import KeychainVocabulary
import SystemCalls
import WireFormat

#if canImport(Glibc)
import Glibc
#endif

// What a query found, read further: a result's secret, an item by class and primary key, the
// protection of a key record.
extension ItemStore {
    /// The secret of an item a query found, opened with `recordKey` when the item is protected;
    /// nil when it was deleted meanwhile.
    ///
    /// - Throws: ``KeychainError`` `.interactionNotAllowed` (protected, and `recordKey` is not its
    ///   record's), `.tampered`.
    package func secret(of result: ItemQueryResult, recordKey: RecordKey?) throws(KeychainError) -> [UInt8]? {
        let state = try currentFollowingUpgrades()
        guard state.layout.version == 2 else { return try item(reference: result.reference)?.value }
        let group = ItemFileV2.groupName(of: result.itemClass, result.attributes, keys: state.keys)
        guard let directory = try groupDirectory(group, create: false, state),
            let file = try directory.openFile(
                ItemFileV2.fileName(of: result.itemClass, result.attributes, keys: state.keys))
        else {
            return nil
        }
        return try readContents(
            try readWhole(file, version: 2), path: file.path,
            expectedPrimaryKey: result.itemClass.encodedPrimaryKey(of: result.attributes), recordKey: recordKey, state
        ).value
    }

    /// The item of `itemClass` whose primary key `primary` gives (absent attributes count as
    /// empty, sync as false), read by its file name: one file, no directory scan. Attributes
    /// only; nil when there is none.
    ///
    /// - Throws: ``KeychainError`` `.tampered` (also for a misplaced file found by the miss check).
    ///
    /// - Parameter withSecret: also decrypt the secret, from the same read, when the item is not
    ///   protected (a protected one's ``ItemQueryResult/value`` stays nil).
    package func item(
        _ itemClass: ItemClass, primary: AttributeList, withSecret: Bool = false
    ) throws(KeychainError) -> ItemQueryResult? {
        try readFollowingRotation { (state) throws(KeychainError) in
            try item(itemClass, primary: primary, withSecret: withSecret, state)
        }
    }

    private func item(
        _ itemClass: ItemClass, primary: AttributeList, withSecret: Bool, _ state: OpenState
    ) throws(KeychainError) -> ItemQueryResult? {
        guard state.layout.version == 2 else {
            return try query(ItemQuery(itemClass: itemClass, matching: primary, synchronizable: .any, limit: .one))
                .first
        }
        let encoded = itemClass.encodedPrimaryKey(of: primary)
        let (group, fileName) = primaryNames(itemClass, primary, encoded: encoded, state)
        let names = ItemNames(version: 2, group: group, file: fileName, encodedIdentity: encoded)
        guard let file = try openItem(names, state) else { return try confirmAbsence(names, state) }
        guard file.size >= ItemFileV2.headerSize, file.size <= ItemFileV2.maximumFileSize else {
            throw KeychainError(.tampered, "\(file.path) has an impossible size (\(file.size) bytes)")
        }
        let whole =
            withSecret ? try file.read(count: file.size, at: 0) : try file.read(count: ItemFileV2.headerSize, at: 0)
        let header = try ItemFileV2.decodeHeader(whole[...], fileSize: file.size, storeID: storeID, path: file.path)
        let key = v2ItemKey(header, state.keys)
        let sealed =
            withSecret
            ? whole[header.attributesRange]
            : try file.read(count: header.attributesRange.count, at: header.attributesRange.lowerBound)[...]
        let attributes = try ItemFileV2.decryptAttributes(sealed, header: header, key: key, path: file.path)
        guard header.itemClass == itemClass, itemClass.encodedPrimaryKey(of: attributes) == names.encodedIdentity else {
            throw KeychainError(.tampered, "\(file.path) holds another item: it was swapped or renamed")
        }
        guard
            try checkGeneration(
                header.generation, file: names.file, group: names.group, path: file.path, in: state.layout.items)
        else {
            return nil
        }
        let protected = header.keyRecord != ItemFileV2.masterKeyRecord
        let value =
            withSecret && !protected
            ? try ItemFileV2.decryptSecret(
                of: whole, header: header, key: key, primaryKey: names.encodedIdentity, path: file.path) : nil
        return ItemQueryResult(
            reference: Self.reference(itemClass, header.itemID), itemClass: itemClass, attributes: attributes,
            accessibility: header.accessibility, kind: header.kind, value: value, keyRecord: header.keyRecord)
    }

    /// The group and file names of the item whose encoded primary key is `encoded`: two keyed
    /// hashes, computed once per item while the store is open (gets and writes by primary key).
    /// Only a password's names are cached: its group (access group, service or server) is part of
    /// its primary key; another class's group also reads the service, which its primary key lacks
    /// and `primary` may hold.
    func primaryNames(
        _ itemClass: ItemClass, _ primary: AttributeList, encoded: [UInt8], _ state: OpenState
    ) -> (group: String, file: String) {
        let cacheable = itemClass == .genericPassword || itemClass == .internetPassword
        if cacheable, let known = nameCache.names(ofPrimaryKey: encoded) { return known }
        let names = (
            group: ItemFileV2.groupName(of: itemClass, primary, keys: state.keys),
            file: ItemFileV2.fileName(of: itemClass, primary, keys: state.keys)
        )
        guard cacheable else { return names }
        nameCache.remember(names, ofPrimaryKey: encoded)
        return names
    }

    /// The protection a key record serves (what opening it needs).
    ///
    /// - Throws: ``KeychainError`` `.tampered` for a missing or damaged record.
    package func protection(ofRecord recordID: [UInt8]) throws(KeychainError) -> ItemProtection {
        let record = try keyRecord(recordID, try current())
        return ItemProtection(
            recordID: recordID, protection: try record.protection(), lockBound: record.flags.contains(.lockBound))
    }

    /// The secret of a scanned item, authenticated with its primary key (the file may have been
    /// replaced since the scan: then the new version's secret, still of the same item).
    func secret(of entry: ScannedItem, _ state: OpenState) throws(KeychainError) -> [UInt8] {
        guard let file = try entry.directory.openFile(entry.file) else {
            throw KeychainError(.itemNotFound, "The item was deleted while it was read")
        }
        let bytes = try readWhole(file, version: state.layout.version)
        if state.layout.version == 1 {
            let identity = ItemIdentity(
                unchecked: entry.attributes.string(AttributeTag.accessGroup) ?? "",
                entry.attributes.string(AttributeTag.service) ?? "", entry.attributes.string(AttributeTag.account) ?? ""
            )
            let header = try ItemFileV1.decodeHeader(
                bytes[0..<ItemFileV1.headerSize], fileSize: file.size, storeID: storeID, path: file.path)
            return try ItemFileV1.decryptSecret(
                of: bytes, header: header, key: v1ItemKey(header, state.keys),
                encodedIdentity: ItemFileV1.encode(identity), path: file.path
            ).bytes
        }
        let header = try ItemFileV2.decodeHeader(bytes[...], fileSize: bytes.count, storeID: storeID, path: file.path)
        return try ItemFileV2.decryptSecret(
            of: bytes, header: header, key: v2SecretKey(header, state, recordKey: nil),
            primaryKey: entry.itemClass.encodedPrimaryKey(of: entry.attributes), path: file.path)
    }
}

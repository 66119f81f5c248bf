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
        let encoded = result.itemClass.encodedPrimaryKey(of: result.attributes)
        let (group, fileName) = primaryNames(result.itemClass, result.attributes, encoded: encoded, state)
        // Only the secret is decrypted: the result has the attributes, and the primary key is the
        // secret's AAD.
        return try readItem(
            ItemNames(version: 2, group: group, file: fileName, encodedIdentity: encoded), of: result.itemClass,
            .secret, recordKey: recordKey, state)?.secret
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
        guard
            let read = try readItem(
                ItemNames(version: 2, group: group, file: fileName, encodedIdentity: encoded), of: itemClass,
                withSecret ? [.attributes, .unprotectedSecret] : .attributes, state)
        else { return nil }
        return ItemQueryResult(
            reference: Self.reference(itemClass, read.itemID), itemClass: itemClass,
            attributes: read.attributes ?? AttributeList(), accessibility: read.accessibility, kind: read.kind,
            value: read.secret, keyRecord: read.keyRecord)
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
        if state.layout.version == 1 {
            guard let value = try formatOne(file, withSecret: true, state).value else { return [] }
            return value.bytes
        }
        let bytes = try readWhole(file, version: 2)
        let header = try ItemFileV2.decodeHeader(bytes[...], fileSize: bytes.count, storeID: storeID, path: file.path)
        return try ItemFileV2.decryptSecret(
            of: bytes, header: header, key: v2SecretKey(header, state, recordKey: nil),
            primaryKey: entry.itemClass.encodedPrimaryKey(of: entry.attributes), path: file.path)
    }
}

import Crypto
import FoundationEssentials
package import KeychainVocabulary
import SystemCalls
import WireFormat

#if canImport(Glibc)
import Glibc
#endif

extension ItemStore {
    /// The items matching `query`, in creation order.
    ///
    /// A query that names the group (service of a generic password, server of an internet
    /// password) reads that group's directory only; any other reads every item's header and
    /// attributes. Secrets are decrypted only for the results, and only when asked.
    ///
    /// - Throws: ``KeychainError`` `.tampered` for any misplaced or damaged file met on the way
    ///   (never skipped), `.storageFailed`.
    package func query(_ query: ItemQuery) throws(KeychainError) -> [ItemQueryResult] {
        // A listing of a rotated-away key's directories would look complete: check first.
        _ = try refreshIfRotated(try current())
        let state = try currentFollowingUpgrades()
        let wanted = query.matching.tags.filter { $0 != AttributeTag.synchronizable }.map {
            (tag: $0, value: query.matching[$0])
        }
        let scanned = try scan(query, state)
        // The entries are read in place and the matches ordered by index, never copied or moved:
        // an entry is a dozen references, and a listing of 10,000 would retain and release each
        // of them at every copy.
        return try scanned.withUnsafeBufferPointer { (entries) throws(KeychainError) -> [ItemQueryResult] in
            var order: [(created: Int64, index: Int)] = []
            order.reserveCapacity(entries.count)
            // Field by field: the compiler copies a whole entry it cannot prove unchanged across a
            // call, and an entry read through a pointer is never proven so.
            for index in entries.indices
            where entries[index].itemClass.rawValue == query.itemClass.rawValue
                && matches(entries[index].attributes, query, wanted)
            {
                order.append((entries[index].attributes.nanoseconds(AttributeTag.creationDate) ?? 0, index))
            }
            order.sort { lhs, rhs in
                lhs.created != rhs.created
                    ? lhs.created < rhs.created
                    : entries[lhs.index].itemID.lexicographicallyPrecedes(entries[rhs.index].itemID)
            }
            if query.limit == .one { order = Array(order.prefix(1)) }
            var results: [ItemQueryResult] = []
            results.reserveCapacity(order.count)
            for (_, index) in order {
                // Field by field: a copy of the whole entry would retain its directory and name too.
                let value = query.returnsData ? try secret(of: entries[index], state) : nil
                let itemClass = entries[index].itemClass
                results.append(
                    ItemQueryResult(
                        reference: Self.reference(itemClass, entries[index].itemID), itemClass: itemClass,
                        attributes: entries[index].attributes, accessibility: entries[index].accessibility,
                        kind: entries[index].kind, value: value, keyRecord: entries[index].keyRecord))
            }
            return results
        }
    }

    /// Every item of the store, of every class and without its secret, handed to `body` as its
    /// file is read, group by group and in no particular order, so that what is held does not
    /// grow with the store (an export of 100,000 items). Each file is checked as ``query(_:)``
    /// checks it; a missing item is reported once every group has been read.
    ///
    /// - Throws: ``KeychainError`` as ``query(_:)``, and what `body` throws (which ends the walk).
    package func forEachItem(_ body: (ItemQueryResult) throws(KeychainError) -> Void) throws(KeychainError) {
        _ = try refreshIfRotated(try current())
        let state = try currentFollowingUpgrades()
        var groupCheck = GroupCheck()
        var seen: Set<Manifest.ItemKey> = []
        let groups = try state.layout.items.entries()
        for group in groups {
            guard let directory = try groupDirectory(group, create: false, state) else { continue }
            for name in try directory.entries() where name.hasSuffix(".item") {
                guard let file = try directory.openFile(name) else { continue }
                let key = Manifest.ItemKey(fileName: name)
                if let key { seen.insert(key) }
                guard
                    let entry = try scannedItem(
                        file, named: name, key: key, in: directory, group: group, &groupCheck, state,
                        groupLocked: false)
                else { continue }
                try body(
                    ItemQueryResult(
                        reference: Self.reference(entry.itemClass, entry.itemID), itemClass: entry.itemClass,
                        attributes: entry.attributes, accessibility: entry.accessibility, kind: entry.kind, value: nil,
                        keyRecord: entry.keyRecord))
            }
        }
        if state.layout.version == 2 {
            try checkListed(groups: Set(groups), seen: seen, in: state.layout.items)
        }
    }

    /// The item a persistent reference names, or nil when it is gone.
    ///
    /// - Throws: as ``query(_:)``.
    package func item(reference: [UInt8]) throws(KeychainError) -> ItemQueryResult? {
        guard reference.count == 20, let itemClass = ItemClass(rawValue: BigEndian.integer(reference.prefix(4))) else {
            throw KeychainError(.invalidParameter, "Not a persistent reference of this store")
        }
        let itemID = Array(reference.suffix(16))
        _ = try refreshIfRotated(try current())
        let state = try currentFollowingUpgrades()
        for entry in try scan(ItemQuery(itemClass: itemClass, synchronizable: .any), state) where entry.itemID == itemID
        {
            return ItemQueryResult(
                reference: reference, itemClass: itemClass, attributes: entry.attributes,
                accessibility: entry.accessibility, kind: entry.kind,
                value: entry.keyRecord == ItemFileV2.masterKeyRecord ? try secret(of: entry, state) : nil,
                keyRecord: entry.keyRecord)
        }
        return nil
    }

    static func reference(_ itemClass: ItemClass, _ itemID: [UInt8]) -> [UInt8] {
        var reference: [UInt8] = []
        reference.reserveCapacity(4 + itemID.count)
        BigEndian.append(itemClass.rawValue, to: &reference)
        reference.append(contentsOf: itemID)
        return reference
    }

    /// An item file read as far as its attributes, with where it was found.
    struct ScannedItem {
        let directory: Directory
        let file: String
        let itemClass: ItemClass
        let itemID: [UInt8]
        let accessibility: Accessibility
        let kind: ValueKind
        let attributes: AttributeList
        var keyRecord = ItemFileV2.masterKeyRecord
    }

    /// Whether an item of the query's class matches the rest of it.
    ///
    /// - Parameter wanted: the query's attributes other than synchronizable, taken out once per query.
    private func matches(
        _ attributes: AttributeList, _ query: ItemQuery, _ wanted: [(tag: FourCharacterCode, value: [UInt8]?)]
    ) -> Bool {
        for (tag, value) in wanted {
            guard attributes.value(tag, equals: value) else { return false }
        }
        let synchronizable = attributes.bool(AttributeTag.synchronizable) ?? false
        switch query.synchronizable {
        case .yes: return synchronizable
        case .no: return !synchronizable
        case .any: return true
        }
    }

    /// Every item of the groups the query can be in, each checked to be where its name says.
    private func scan(_ query: ItemQuery, _ state: OpenState) throws(KeychainError) -> [ScannedItem] {
        let groupTag = query.itemClass == .internetPassword ? AttributeTag.server : AttributeTag.service
        let groups: [String]
        if query.matching[groupTag] != nil, state.layout.version == 2 {
            groups = [ItemFileV2.groupName(of: query.itemClass, query.matching, keys: state.keys)]
        } else if let service = query.matching.string(AttributeTag.service), query.itemClass == .genericPassword {
            groups = [
                groupName(service: service, accessGroup: query.matching.string(AttributeTag.accessGroup) ?? "", state)
            ]
        } else {
            groups = try state.layout.items.entries()
        }
        return try scan(groups: groups, state)
    }

    /// Every item of the group directories named, each checked to be the item its file name says
    /// and to belong to the group its directory's name says: a renamed file or a swapped directory
    /// is reported, never skipped. Each directory read whole is then known to be consistent until
    /// it changes (``confirmAbsence(_:_:)`` relies on that).
    func scan(groups: [String], _ state: OpenState, groupLocked: Bool = false) throws(KeychainError) -> [ScannedItem] {
        var scanned: [ScannedItem] = []
        var groupCheck = GroupCheck()
        var seen: Set<Manifest.ItemKey> = []
        for group in groups {
            guard let directory = try groupDirectory(group, create: false, state) else { continue }
            let stamp = try directory.stamp()
            let names = try directory.entries()
            // Sized once, as a listing's other arrays are: grown by doubling, it would be copied
            // into fresh pages again and again.
            scanned.reserveCapacity(scanned.count + names.count)
            for name in names where name.hasSuffix(".item") {
                guard let file = try directory.openFile(name) else { continue }
                let key = Manifest.ItemKey(fileName: name)
                if let key { seen.insert(key) }
                if let item = try scannedItem(
                    file, named: name, key: key, in: directory, group: group, &groupCheck, state,
                    groupLocked: groupLocked)
                {
                    scanned.append(item)
                }
            }
            if try directory.stamp() == stamp {
                groupDirectories.setConsistent(group, at: stamp)
            }
        }
        if state.layout.version == 2 {
            try checkListed(groups: Set(groups), seen: seen, in: state.layout.items, groupLocked: groupLocked)
        }
        return scanned
    }

    /// The group name of the last item checked: the items of one directory share it, so a
    /// listing computes it once per group rather than once per item.
    private struct GroupCheck {
        var fields: (itemClass: ItemClass, accessGroup: [UInt8]?, group: [UInt8]?)?
        var name = ""

        mutating func name(of itemClass: ItemClass, _ attributes: AttributeList, keys: StoreKeys) -> String {
            let groupTag = itemClass == .internetPassword ? AttributeTag.server : AttributeTag.service
            if let fields, fields.itemClass == itemClass,
                attributes.value(AttributeTag.accessGroup, equals: fields.accessGroup),
                attributes.value(groupTag, equals: fields.group)
            {
                return name
            }
            fields = (itemClass, attributes[AttributeTag.accessGroup], attributes[groupTag])
            name = ItemFileV2.groupName(of: itemClass, attributes, keys: keys)
            return name
        }
    }

    private func scannedItem(
        _ file: OpenFile, named name: String, key manifestKey: Manifest.ItemKey?, in directory: Directory,
        group: String,
        _ groupCheck: inout GroupCheck, _ state: OpenState, groupLocked: Bool
    ) throws(KeychainError) -> ScannedItem? {
        if state.layout.version == 1 {
            let read = try formatOne(file, withSecret: false, state)
            let (header, attributes) = (read.header, read.attributes)
            let names = names(ItemIdentity(checked: attributes), state)
            try Self.checkPlacement(
                fileMatches: names.file == name, groupMatches: names.group == group, file.path, directory.path)
            let list = AttributeList(formatOne: attributes)
            return ScannedItem(
                directory: directory, file: name, itemClass: .genericPassword, itemID: header.itemID,
                accessibility: header.accessibility, kind: header.kind, attributes: list)
        }
        guard file.size >= ItemFileV2.headerSize, file.size <= ItemFileV2.maximumFileSize else {
            throw KeychainError(.tampered, "\(file.path) has an impossible size (\(file.size) bytes)")
        }
        // A small file is read whole, in one system call, as its floor reads it; a large secret
        // is left unread.
        let whole = file.size <= Self.listingWholeReadLimit ? try file.read(count: file.size, at: 0) : nil
        let headerBytes: [UInt8]
        if let whole { headerBytes = whole } else { headerBytes = try file.read(count: ItemFileV2.headerSize, at: 0) }
        let header = try ItemFileV2.decodeHeader(
            headerBytes[...], fileSize: file.size, storeID: storeID, path: file.path)
        let sealed: ArraySlice<UInt8>
        if let whole {
            sealed = whole[header.attributesRange]
        } else {
            sealed = try file.read(count: header.attributesRange.count, at: header.attributesRange.lowerBound)[...]
        }
        let salt = WriteSalt(header.salt)
        let attributes: AttributeList
        let fileName: String
        if let cached = decryptions.listed(salt, holding: header.bytes, sealed: sealed) {
            // Byte for byte what GCM authenticated before, under the same key, nonce and AAD:
            // it decrypts to the same attributes.
            attributes = cached.attributes
            fileName = cached.file
        } else {
            let key = ItemFileV2.itemKey(
                parent: state.keys.items, salt: header.salt, storeID: storeID, keyRecord: header.keyRecord)
            attributes = try ItemFileV2.decryptAttributes(sealed, header: header, key: key, path: file.path)
            fileName = ItemFileV2.fileName(of: header.itemClass, attributes, keys: state.keys)
            let listed = ListedWrite(header: header.bytes, sealed: sealed, attributes: attributes, file: fileName)
            decryptions.rememberListed(listed, salt: salt)
        }
        try Self.checkPlacement(
            fileMatches: fileName == name,
            groupMatches: groupCheck.name(of: header.itemClass, attributes, keys: state.keys) == group,
            file.path, directory.path)
        guard
            try checkGeneration(
                header.generation, file: name, key: manifestKey, group: group, path: file.path,
                in: state.layout.items, groupLocked: groupLocked)
        else {
            return nil
        }
        return ScannedItem(
            directory: directory, file: name, itemClass: header.itemClass, itemID: header.itemID,
            accessibility: header.accessibility, kind: header.kind, attributes: attributes, keyRecord: header.keyRecord)
    }

    /// Files up to this size are read whole by a listing: a page, which holds any item without a
    /// large secret.
    private static let listingWholeReadLimit = 4096

    /// - Throws: ``KeychainError`` `.tampered` when a file is not where its decrypted primary key puts it.
    private static func checkPlacement(
        fileMatches: Bool, groupMatches: Bool, _ path: String, _ directory: String
    ) throws(KeychainError) {
        guard fileMatches else {
            throw KeychainError(.tampered, "\(path) holds another item: it was swapped or renamed")
        }
        guard groupMatches else {
            throw KeychainError(
                .tampered, "\(directory) holds an item of another service: directories or files were swapped or moved")
        }
    }

}

import Crypto
import FoundationEssentials
package import KeychainVocabulary
import SystemCalls

#if canImport(Glibc)
import Glibc
#endif

// The write path: every change of an item, under its service's lock (bounded wait), durable and
// atomic.
extension ItemStore {
    /// Writes an item under the store lock (shared) and its group's lock: durable, atomic, and
    /// safe against concurrent writers in this and other processes. A nil `value` keeps the
    /// stored secret (update only). Attributes the item has and the change does not name (also
    /// ones a later version added) are kept. The first write to a format-1 store upgrades it.
    ///
    /// - Throws: ``KeychainError`` `.duplicateItem`, `.itemNotFound`, `.invalidParameter` (sizes),
    ///   `.tampered` (the existing file is damaged: remove it first), `.timedOut`, `.storageFailed`.
    package func write(
        _ identity: ItemIdentity, mode: ItemWriteMode, value: ItemValue?, changes: AttributeChanges,
        access: AccessWrite? = nil
    ) throws(KeychainError) {
        try write(
            .genericPassword, primary: AttributeList(identity), mode: mode, value: value, changes: changes,
            access: access)
    }

    /// How a write protects the item: the protection of a new key record (or none), the device
    /// that holds the passcode and enrollment, the enrollment the item binds to, and an opened
    /// record key (needed only to change a protected item without giving its value).
    package struct AccessWrite: Sendable {
        package var protection: Protection?
        package var device: Device
        package var enrollmentIdentifier: [UInt8]?
        package var recordKey: RecordKey?
        /// The record a new protection must use, chosen before the write (a TPM key's policy was
        /// made from it: ``ItemStore/makeTPMKey(_:device:protection:enrollmentIdentifier:)``).
        package var record: [UInt8]?

        package init(
            protection: Protection?, device: Device, enrollmentIdentifier: [UInt8]? = nil, recordKey: RecordKey? = nil,
            record: [UInt8]? = nil
        ) {
            self.protection = protection
            self.device = device
            self.enrollmentIdentifier = enrollmentIdentifier
            self.recordKey = recordKey
            self.record = record
        }
    }

    /// Writes an item of any class named by the primary-key attributes in `primary` (absent
    /// ones count as empty, an absent `sync` as false); what else `primary` holds is set too.
    ///
    /// - Throws: as ``write(_:mode:value:changes:)``; `.invalidParameter` for a reserved class or
    ///   a primary key without its service and account (generic) or server (internet).
    package func write(
        _ itemClass: ItemClass, primary: AttributeList, mode: ItemWriteMode, value: ItemValue?,
        changes: AttributeChanges, access: AccessWrite? = nil
    ) throws(KeychainError) {
        try Self.validate(value: value, changes: changes)
        try Self.validate(itemClass, primary)
        // Formatted only for an error message.
        let description = { Self.describe(itemClass, primary) }
        try withWriteAccess { (state) throws(KeychainError) in
            let primaryKey = itemClass.encodedPrimaryKey(of: primary)
            let (group, fileName) = primaryNames(itemClass, primary, encoded: primaryKey, state)
            guard let directory = try groupDirectory(group, create: true, state) else {
                throw KeychainError(.storageFailed, "Cannot create the directory for \(description())")
            }
            let lock = try lockGroup(directory, named: group)
            defer { unlock(lock, pooledAs: group, in: directory) }

            // Only an update without a value needs the old secret; an upsert reads header and attributes.
            // A file older than the manifest records is refused (its attributes would come back);
            // one an interrupted delete left counts as absent.
            let key = HeldItemFile.Key(group: group, file: fileName)
            var existing: ItemFileV2.Contents?
            if let file = try openItemFile(key, in: directory, stamp: nil, held: groupDirectories.heldFile(key)) {
                let contents = try readContents(
                    try readWhole(file, version: 2), path: file.path, expectedPrimaryKey: primaryKey,
                    withSecret: value == nil, recordKey: access?.recordKey, writtenAs: fileName, state)
                existing =
                    try checkGeneration(
                        contents.generation, file: fileName, group: group, path: file.path, in: state.layout.items,
                        groupLocked: true) ? contents : nil
            } else {
                try checkAbsence(file: fileName, group: group, in: state.layout.items, groupLocked: true)
            }
            switch (mode, existing) {
            case (.add, .some):
                throw KeychainError(.duplicateItem, "An item for \(description()) already exists")
            case (.update, .none):
                throw KeychainError(.itemNotFound, "No item for \(description())")
            default:
                break
            }
            guard let newValue = value ?? existing.map({ ItemValue(kind: $0.kind, bytes: $0.value) }) else {
                throw KeychainError(.invalidParameter, "A new item needs a value")
            }
            var attributes = existing?.attributes ?? AttributeList()
            for tag in primary.tags { attributes[tag] = primary[tag] }
            changes.apply(to: &attributes)
            let now = Self.nanosecondsNow()
            if attributes.nanoseconds(AttributeTag.creationDate) == nil {
                attributes.setNanoseconds(now, for: AttributeTag.creationDate)
            }
            attributes.setNanoseconds(changes.modificationDate ?? now, for: AttributeTag.modificationDate)
            // A new protection chooses the record; otherwise the item keeps the one it has.
            let record: KeyRecord?
            if let access, let pinned = access.record {
                record = try keyRecord(pinned, state)
            } else if let access, let protection = access.protection {
                let device = access.device
                let passcodeSet = { () throws(KeychainError) in try device.passcodeIsSet() }
                if try protection.needsKeyRecord(passcodeSet: passcodeSet) {
                    record = try self.record(
                        for: protection, device: device, enrollmentIdentifier: access.enrollmentIdentifier, state)
                } else {
                    record = nil
                }
            } else if let recordID = existing?.keyRecord, recordID != ItemFileV2.masterKeyRecord {
                record = try keyRecord(recordID, state)
            } else {
                record = nil
            }
            let contents = ItemFileV2.Contents(
                itemID: existing?.itemID ?? randomBytes(16),
                generation: rollback.nextGeneration(file: fileName, existing: existing?.generation),
                itemClass: itemClass,
                keyRecord: record?.recordID ?? ItemFileV2.masterKeyRecord,
                accessibility: access?.protection?.accessibility ?? changes.accessibility ?? existing?.accessibility
                    ?? .whenUnlocked,
                kind: newValue.kind, attributes: attributes, value: newValue.bytes)
            let bytes = try encode(contents, record: record, state)
            // Remembered now, while the sealing's code and data are still in the CPU's caches (the
            // fsyncs below leave them cold): the entry serves only a file that holds exactly these
            // bytes, so a write that fails from here on leaves it unused.
            remember(bytes, of: contents, file: fileName)
            let path = Manifest.ItemPath(group: group, file: fileName)
            if let existing, !rollback.isRecorded(fileName, generation: existing.generation) {
                // The file is one the manifest accepted without recording it (a writer that died
                // after its rename): recorded first, so that it stays accepted if this write dies too.
                try recordInManifest(.set, [(path, existing.generation)])
            }
            // Announced before the rename when the manifest needs it to accept the new file should
            // this writer be killed before its "S" record (see `writeNeedsAnnouncement`).
            if rollback.writeNeedsAnnouncement(fileName) {
                try recordInManifest(.writing, [(path, contents.generation)])
            }
            try changing(directory, item: key) { () throws(KeychainError) in
                // The new file stays open for the next get, which then opens nothing.
                let written = try directory.replace(fileName, with: bytes, durable: durable, keepOpen: true)
                groupDirectories.hold(
                    written.map { HeldItemFile(directory: directory, name: fileName, file: $0, stamp: nil) }, for: key)
            }
            try recordInManifest(.set, [(path, contents.generation)])
        }
    }

    /// Caches what a write just sealed (see ``Caches/written``), so that the next upsert of the
    /// item skips its attributes' key derivation and decryption. The attributes are decoded
    /// from the very plaintext that was sealed, as a decryption would decode them.
    private func remember(_ bytes: [UInt8], of contents: ItemFileV2.Contents, file: String) {
        // Both only fail on bytes this process did not make; no message is shown.
        guard
            let header = try? ItemFileV2.decodeHeader(bytes[...], fileSize: bytes.count, storeID: storeID, path: file),
            let attributes = try? AttributeList(decoding: contents.attributes.encoded(), path: file)
        else { return }
        let write = ListedWrite(
            header: header.bytes, sealed: bytes[header.attributesRange], attributes: attributes, file: file)
        decryptions.rememberWritten(write, file: file)
    }

    /// Deletes the item of any class named by `primary`. - Returns: false if it did not exist.
    package func delete(_ itemClass: ItemClass, primary: AttributeList) throws(KeychainError) -> Bool {
        try Self.validate(itemClass, primary)
        return try withWriteAccess { (state) throws(KeychainError) -> Bool in
            let group = ItemFileV2.groupName(of: itemClass, primary, keys: state.keys)
            guard let directory = try groupDirectory(group, create: false, state) else { return false }
            let lock = try lockGroup(directory, named: group)
            defer { unlock(lock, pooledAs: group, in: directory) }
            let fileName = ItemFileV2.fileName(of: itemClass, primary, keys: state.keys)
            let generation = try recordDeletion(of: fileName, in: directory, group: group)
            let removed = try changing(directory, item: HeldItemFile.Key(group: group, file: fileName)) {
                () throws(KeychainError) in
                try directory.remove(fileName, durable: durable)
            }
            try recordDeletionDone(of: fileName, group: group, generation: generation)
            return removed
        }
    }

    private static func validate(_ itemClass: ItemClass, _ primary: AttributeList) throws(KeychainError) {
        // As on Apple's platforms, an absent primary-key attribute counts as empty: SecItem code
        // stores generic passwords without a service. The Keychain API requires names itself.
        for tag in primary.tags {
            let limit =
                tag == AttributeTag.generic
                ? ItemFileV1.maximumGenericDataBytes
                : [AttributeTag.label, AttributeTag.comment, AttributeTag.description].contains(tag)
                    ? ItemFileV1.maximumLabelBytes
                    : ItemIdentity.maximumNameBytes
            guard (primary[tag]?.count ?? 0) <= limit else {
                throw KeychainError(.invalidParameter, "The \(tag) attribute is over \(limit) bytes")
            }
        }
    }

    private static func describe(_ itemClass: ItemClass, _ primary: AttributeList) -> String {
        let account = primary.string(AttributeTag.account).map { "account \"\($0)\" of " } ?? ""
        switch itemClass {
        case .internetPassword: return account + "server \"\(primary.string(AttributeTag.server) ?? "")\""
        default: return account + "service \"\(primary.string(AttributeTag.service) ?? "")\""
        }
    }

    /// Format-2 bytes of `contents` with a fresh salt and nonce.
    func encode(
        _ contents: ItemFileV2.Contents, record: KeyRecord? = nil, _ state: OpenState
    ) throws(KeychainError) -> [UInt8] {
        // Salt and nonce from one read of the system's generator (one system call per write).
        let random = randomBytes(32 + 12)
        var salt = Array(random[..<32])
        let nonce = Array(random[32...])
        var secretKey: ((SymmetricKey) -> SymmetricKey)?
        if let record {
            (salt, secretKey) = try Self.protectedWriteKeys(
                record: record, storeID: storeID, itemsKey: state.keys.items)
        }
        // The write's key, derived through the decryption cache: the first read after the write
        // (this process's next get, as often as not) finds it there rather than deriving it again.
        let key = itemKey(salt: salt[...]) { [storeID] in
            ItemFileV2.itemKey(
                parent: state.keys.items, salt: salt[...], storeID: storeID, keyRecord: contents.keyRecord)
        }
        do {
            return try ItemFileV2.encode(
                contents, itemKeyParent: state.keys.items, storeID: storeID, salt: salt,
                nonce: nonce, secretKey: secretKey, derivedKey: key)
        } catch {
            throw KeychainError(.storageFailed, "Encryption failed", underlying: error)
        }
    }

    /// Nanoseconds since 1970: format 2's dates, fine enough to order items created in a burst.
    static func nanosecondsNow() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
    }

    private static func validate(value: ItemValue?, changes: AttributeChanges) throws(KeychainError) {
        if let value, value.bytes.count > ItemValue.maximumSize {
            throw KeychainError(
                .invalidParameter,
                "The value is \(value.bytes.count) bytes; the limit is \(ItemValue.maximumSize) (16 MiB)")
        }
        for (text, what) in [(changes.label, "label"), (changes.comment, "comment")] {
            if let text, text.utf8.count > ItemFileV1.maximumLabelBytes {
                throw KeychainError(
                    .invalidParameter,
                    "The \(what) is \(text.utf8.count) bytes; the limit is \(ItemFileV1.maximumLabelBytes)")
            }
        }
        if let generic = changes.genericData, generic.count > ItemFileV1.maximumGenericDataBytes {
            throw KeychainError(
                .invalidParameter,
                "The generic data is \(generic.count) bytes; the limit is \(ItemFileV1.maximumGenericDataBytes)")
        }
    }

    /// Runs `body`, which changes the file of `item` in `directory`, its group's directory.
    func changing<R>(
        _ directory: Directory, item: HeldItemFile.Key, _ body: () throws(KeychainError) -> R
    ) throws(KeychainError) -> R {
        // The item's held file is let go first: a removed or replaced file's inode should not
        // outlive it in this process. Other items' held files stay: their names still name them.
        let serviceName = item.group
        let known = groupDirectories.releaseForWriting(item)
        // Nothing to carry forward for a directory never checked: spare the write path two fstats.
        guard let known else { return try body() }
        let unchangedBefore = try directory.stamp() == known
        let result = try body()
        if unchangedBefore {
            let after = try directory.stamp()
            groupDirectories.setConsistent(serviceName, at: after)
        } else {
            groupDirectories.setConsistent(serviceName, at: nil)
        }
        return result
    }
}

import Crypto
import Foundation
import SystemCalls
#if canImport(Glibc)
import Glibc
#endif

// The write path: every change of an item, under its service's lock (bounded wait), durable and
// atomic.
extension ItemStore {
    package enum WriteMode: Sendable {
        /// Create; fail with `.duplicateItem` if the item exists.
        case add
        /// Change; fail with `.itemNotFound` if the item does not exist.
        case update
        /// Create or replace.
        case upsert
    }

    /// Writes an item under the store lock (shared) and its group's lock: durable, atomic, and
    /// safe against concurrent writers in this and other processes. A nil `value` keeps the
    /// stored secret (update only). Attributes the item has and the change does not name (also
    /// ones a later version added) are kept. The first write to a format-1 store upgrades it.
    ///
    /// - Throws: ``KeychainError`` `.duplicateItem`, `.itemNotFound`, `.invalidParameter` (sizes),
    ///   `.tampered` (the existing file is damaged: remove it first), `.timedOut`, `.storageFailed`.
    package func write(_ identity: ItemIdentity, mode: WriteMode, value: ItemValue?, changes: AttributeChanges) throws(KeychainError) {
        try Self.validate(value: value, changes: changes)
        try withWriteAccess { (state) throws(KeychainError) in
            let names = names(identity, state)
            guard let directory = try serviceDirectory(names.service, create: true, state) else {
                throw KeychainError(.storageFailed, "Cannot create the directory for service \"\(identity.service)\"")
            }
            let lock = try directory.lock(".lock", timeout: lockTimeout)
            defer { withExtendedLifetime(lock) {} }

            let existing: ItemFileV2.Contents?
            if let file = try directory.openFile(names.file) {
                existing = try readContents(try readWhole(file, version: 2), path: file.path, expectedPrimaryKey: names.encodedIdentity, state)
            } else {
                existing = nil
            }
            switch (mode, existing) {
            case (.add, .some):
                throw KeychainError(.duplicateItem, "An item for account \"\(identity.account)\" of service \"\(identity.service)\" already exists")
            case (.update, .none):
                throw KeychainError(.itemNotFound, "No item for account \"\(identity.account)\" of service \"\(identity.service)\"")
            default:
                break
            }
            guard let newValue = value ?? existing.map({ ItemValue(kind: $0.kind, bytes: $0.value) }) else {
                throw KeychainError(.invalidParameter, "A new item needs a value")
            }
            var attributes = existing?.attributes ?? AttributeList(identity)
            changes.apply(to: &attributes)
            let now = Self.nanosecondsNow()
            if attributes.nanoseconds(AttributeTag.creationDate) == nil { attributes.setNanoseconds(now, for: AttributeTag.creationDate) }
            attributes.setNanoseconds(now, for: AttributeTag.modificationDate)
            let contents = ItemFileV2.Contents(
                itemID: existing?.itemID ?? randomBytes(16), generation: (existing?.generation ?? 0) + 1, itemClass: .genericPassword,
                keyRecord: existing?.keyRecord ?? ItemFileV2.masterKeyRecord,
                accessibility: changes.accessibility ?? existing?.accessibility ?? .whenUnlocked, kind: newValue.kind,
                attributes: attributes, value: newValue.bytes)
            let bytes = try encode(contents, state)
            try changing(directory, named: names.service) { () throws(KeychainError) in
                try directory.replace(names.file, with: bytes, durable: durable)
            }
        }
    }

    /// Format-2 bytes of `contents` with a fresh salt and nonce.
    func encode(_ contents: ItemFileV2.Contents, _ state: OpenState) throws(KeychainError) -> [UInt8] {
        do {
            return try ItemFileV2.encode(contents, itemKeyParent: state.keys.items, storeID: storeID, salt: randomBytes(32),
                                         nonce: randomBytes(12))
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

    /// Deletes one item. - Returns: false if it did not exist.
    package func delete(_ identity: ItemIdentity) throws(KeychainError) -> Bool {
        try withWriteAccess { (state) throws(KeychainError) -> Bool in
            let names = names(identity, state)
            guard let directory = try serviceDirectory(names.service, create: false, state) else { return false }
            let lock = try directory.lock(".lock", timeout: lockTimeout)
            defer { withExtendedLifetime(lock) {} }
            let removed = try changing(directory, named: names.service) { () throws(KeychainError) in
                try directory.remove(names.file, durable: durable)
            }
            if !removed { _ = try confirmAbsence(names, state) as Bool? }
            return removed
        }
    }

    /// Deletes every item of a service, and temporary files dead writers left. - Returns: how many items.
    package func deleteAll(service: String, accessGroup: String) throws(KeychainError) -> Int {
        try withWriteAccess { (state) throws(KeychainError) -> Int in
            try deleteAll(service: service, accessGroup: accessGroup, state)
        }
    }

    private func deleteAll(service: String, accessGroup: String, _ state: OpenState) throws(KeychainError) -> Int {
        guard let directory = try serviceDirectory(groupName(service: service, accessGroup: accessGroup, state), create: false, state) else {
            return 0
        }
        let lock = try directory.lock(".lock", timeout: lockTimeout)
        defer { withExtendedLifetime(lock) {} }
        var removed = 0
        for name in try directory.entries() {
            if name.hasSuffix(".item") {
                if try directory.remove(name, durable: false) { removed += 1 }
            } else if name.hasSuffix(Directory.temporarySuffix) {
                _ = try directory.remove(name, durable: false)
            }
        }
        if durable && removed > 0 { try directory.sync() }
        return removed
    }

    private static func validate(value: ItemValue?, changes: AttributeChanges) throws(KeychainError) {
        if let value, value.bytes.count > ItemValue.maximumSize {
            throw KeychainError(.invalidParameter, "The value is \(value.bytes.count) bytes; the limit is \(ItemValue.maximumSize) (16 MiB)")
        }
        for (text, what) in [(changes.label, "label"), (changes.comment, "comment")] {
            if let text, text.utf8.count > ItemFile.maximumLabelBytes {
                throw KeychainError(.invalidParameter, "The \(what) is \(text.utf8.count) bytes; the limit is \(ItemFile.maximumLabelBytes)")
            }
        }
        if let generic = changes.genericData, generic.count > ItemFile.maximumGenericDataBytes {
            throw KeychainError(.invalidParameter, "The generic data is \(generic.count) bytes; the limit is \(ItemFile.maximumGenericDataBytes)")
        }
    }

    private func changing<R>(_ directory: Directory, named serviceName: String, _ body: () throws(KeychainError) -> R) throws(KeychainError) -> R {
        // Nothing to carry forward for a directory never checked: spare the write path two fstats.
        guard let known = caches.withLock({ $0.consistent[serviceName] }) else { return try body() }
        let unchangedBefore = try directory.stamp() == known
        let result = try body()
        if unchangedBefore {
            let after = try directory.stamp()
            caches.withLock { $0.consistent[serviceName] = after }
        } else {
            caches.withLock { _ = $0.consistent.removeValue(forKey: serviceName) }
        }
        return result
    }
}

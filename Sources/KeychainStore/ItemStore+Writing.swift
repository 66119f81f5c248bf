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

    /// Writes an item under the service's lock: durable, atomic, and safe against concurrent
    /// writers in this and other processes. A nil `value` keeps the stored secret (update only).
    ///
    /// - Throws: ``KeychainError`` `.duplicateItem`, `.itemNotFound`, `.invalidParameter` (sizes),
    ///   `.tampered` (the existing file is damaged: remove it first), `.storageFailed`.
    package func write(_ identity: ItemIdentity, mode: WriteMode, value: ItemValue?, changes: AttributeChanges) throws(KeychainError) {
        try Self.validate(value: value, changes: changes)
        let keys = try currentKeys()
        let names = names(identity, keys: keys)
        guard let directory = try serviceDirectory(names.service, create: true) else {
            throw KeychainError(.storageFailed, "Cannot create the directory for service \"\(identity.service)\"")
        }
        let lock = try directory.lock(".lock", timeout: lockTimeout)
        defer { withExtendedLifetime(lock) {} }

        // Only an attribute update needs the old secret; an upsert with a value reads header and attributes.
        let existing: (itemID: [UInt8], generation: UInt64, attributes: ItemAttributes, value: ItemValue?)?
        if let file = try directory.openFile(names.file) {
            if value == nil {
                let record = try readItem(file, expected: identity, keys: keys)
                existing = (record.itemID, record.generation, record.attributes, record.value)
            } else {
                let (header, attributes) = try readHeaderAndAttributes(file, expected: identity, keys: keys)
                existing = (header.itemID, header.generation, attributes, nil)
            }
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
        guard let newValue = value ?? existing?.value else {
            throw KeychainError(.invalidParameter, "A new item needs a value")
        }
        let now = Date()
        let old = existing?.attributes
        let attributes = ItemAttributes(
            service: identity.service, account: identity.account, accessGroupName: identity.accessGroup,
            label: changes.label ?? old?.label, comment: changes.comment ?? old?.comment,
            genericData: changes.genericData ?? old?.genericData,
            creationDate: old?.creationDate ?? now, modificationDate: now,
            accessibility: changes.accessibility ?? old?.accessibility ?? .whenUnlocked)
        let record = ItemRecord(itemID: existing?.itemID ?? randomBytes(16), generation: (existing?.generation ?? 0) + 1,
                                attributes: attributes, value: newValue)
        let bytes: [UInt8]
        do {
            bytes = try ItemFile.encode(record, keys: keys, storeID: storeID, salt: randomBytes(32), nonce: randomBytes(12))
        } catch {
            throw KeychainError(.storageFailed, "Encryption failed", underlying: error)
        }
        try changing(directory, named: names.service) { () throws(KeychainError) in
            try directory.replace(names.file, with: bytes, durable: durable)
        }
    }

    /// Deletes one item. - Returns: false if it did not exist.
    package func delete(_ identity: ItemIdentity) throws(KeychainError) -> Bool {
        let keys = try currentKeys()
        let names = names(identity, keys: keys)
        guard let directory = try serviceDirectory(names.service, create: false) else { return false }
        let lock = try directory.lock(".lock", timeout: lockTimeout)
        defer { withExtendedLifetime(lock) {} }
        let removed = try changing(directory, named: names.service) { () throws(KeychainError) in
            try directory.remove(names.file, durable: durable)
        }
        if !removed { _ = try confirmAbsence(names, keys: keys) as Bool? }
        return removed
    }

    /// Deletes every item of a service, and temporary files dead writers left. - Returns: how many items.
    package func deleteAll(service: String, accessGroup: String) throws(KeychainError) -> Int {
        let keys = try currentKeys()
        guard let directory = try serviceDirectory(keys.name("service", [accessGroup, service]), create: false) else { return 0 }
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

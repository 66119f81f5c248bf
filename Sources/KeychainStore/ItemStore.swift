import Crypto
import Foundation
import Synchronization
import SystemCalls
package import TPM
#if canImport(Glibc)
import Glibc
#endif

/// An opened keychain store: a directory of sealed item files under one TPM-sealed master key.
///
///     <root>/               0700  flock on the directory itself: creating or opening the store
///       store.meta          0600  format version, store ID, sealed master key, MAC
///       storage-key.context 0600  the TPM context of the storage key, to skip deriving it again
///       items/              0700
///         <service>/        0700  HMAC(names key, access group, service), 32 hex digits
///           .lock           0600  flock: writers of this service, across processes
///           <account>.item  0600  HMAC(names key, access group, service, account) + ".item"
///           <account>.item.tmp    only while written, or left by a writer that died
///
/// The TPM is used once, to unseal the master key when the store is opened; from then on every
/// operation is file I/O and AES-GCM. Readers take no lock: files are replaced by rename, so a
/// reader sees the old item or the new one. Writers of one service serialise on its lock file.
package final class ItemStore: Sendable {
    package let root: String
    package let storeID: [UInt8]
    /// Off only where a benchmark fills a store with many items it will not need after a crash.
    package let durable: Bool
    let items: Directory
    private let keys: Mutex<StoreKeys?>
    private let caches = Mutex(Caches())

    /// What a get would otherwise recompute or reopen: two HMACs for the names, an HKDF for the
    /// key, and the service directory (opened and verified once). All bounded, all emptied by
    /// ``close()``. A cached item key is found by its write's random salt, so a hit means the same
    /// file version; GCM still authenticates every byte.
    private struct Caches {
        static let limit = 4096
        var names: [ItemIdentity: ItemNames] = [:]
        var itemKeys: [[UInt8]: SymmetricKey] = [:]
        var services: [String: Directory] = [:]
        /// Service directories whose every item file was read and found where it belongs, with
        /// the directory's stamp at the time: a miss in one is genuine while the stamp holds.
        var consistent: [String: Directory.Stamp] = [:]
    }

    /// An item's directory and file name inside `items/`, and its identity as the secret's AAD encodes it.
    private struct ItemNames {
        let service: String
        let file: String
        let encodedIdentity: [UInt8]
    }

    /// The longest a writer waits for another process's lock of a service.
    let lockTimeout: Duration

    init(root: String, storeID: [UInt8], items: Directory, keys: StoreKeys, durable: Bool, lockTimeout: Duration) {
        self.root = root
        self.storeID = storeID
        self.items = items
        self.keys = Mutex(keys)
        self.durable = durable
        self.lockTimeout = lockTimeout
    }

    /// Erases the keys from memory; later calls throw `.storeClosed`.
    package func close() {
        keys.withLock { $0 = nil }
        caches.withLock { $0 = Caches() }
    }

    private func currentKeys() throws(KeychainError) -> StoreKeys {
        guard let current = keys.withLock({ $0 }) else {
            throw KeychainError(.storeClosed, "The keychain store at \(root) is closed")
        }
        return current
    }

    // MARK: Names and directories

    private func names(_ identity: ItemIdentity, keys: StoreKeys) -> ItemNames {
        if let cached = caches.withLock({ $0.names[identity] }) { return cached }
        let names = ItemNames(service: keys.name("service", [identity.accessGroup, identity.service]),
                              file: keys.name("item", [identity.accessGroup, identity.service, identity.account]) + ".item",
                              encodedIdentity: ItemFile.encode(identity))
        caches.withLock { caches in
            if caches.names.count >= Caches.limit { caches.names.removeAll(keepingCapacity: true) }
            caches.names[identity] = names
        }
        return names
    }

    /// The service's directory: opened once, re-checked (fstat) on every use, and opened (or
    /// created) again if it was removed from the file system meanwhile.
    private func serviceDirectory(_ name: String, create: Bool) throws(KeychainError) -> Directory? {
        if let cached = caches.withLock({ $0.services[name] }) {
            if try cached.revalidate() { return cached }
            forgetServiceDirectory(name)
        }
        guard let opened = try Directory.open(name, in: items, create: create) else { return nil }
        caches.withLock { caches in
            if caches.services.count >= Caches.limit { caches.services.removeAll(keepingCapacity: true) }
            caches.services[name] = opened
        }
        return opened
    }

    private func forgetServiceDirectory(_ name: String) {
        caches.withLock { _ = $0.services.removeValue(forKey: name) }
    }

    /// The item's file, or nil.
    private func openItem(_ names: ItemNames) throws(KeychainError) -> OpenFile? {
        try serviceDirectory(names.service, create: false)?.openFile(names.file)
    }

    /// The item key of the write that produced `header`.
    private func itemKey(for header: ItemFile.Header, keys: StoreKeys) -> SymmetricKey {
        if let cached = caches.withLock({ $0.itemKeys[header.salt] }) { return cached }
        let key = keys.itemKey(salt: header.salt, storeID: header.storeID)
        caches.withLock { caches in
            if caches.itemKeys.count >= Caches.limit { caches.itemKeys.removeAll(keepingCapacity: true) }
            caches.itemKeys[header.salt] = key
        }
        return key
    }

    // MARK: Reading

    /// The item with its secret, or nil when there is none.
    ///
    /// - Throws: ``KeychainError`` `.tampered` (never wrong data), `.unsafeFileSystem`, `.storageFailed`.
    package func item(_ identity: ItemIdentity) throws(KeychainError) -> ItemRecord? {
        let keys = try currentKeys()
        let names = names(identity, keys: keys)
        guard let file = try openItem(names) else { return try confirmAbsence(names, keys: keys) }
        return try readItem(file, expected: identity, keys: keys)
    }

    /// Only the item's secret, or nil when there is none: one authenticated decryption, no attributes.
    ///
    /// - Throws: ``KeychainError`` `.tampered` (also for a file of another item), `.unsafeFileSystem`, `.storageFailed`.
    package func value(_ identity: ItemIdentity) throws(KeychainError) -> ItemValue? {
        let keys = try currentKeys()
        let names = names(identity, keys: keys)
        guard let file = try openItem(names) else { return try confirmAbsence(names, keys: keys) }
        let (bytes, header) = try readWhole(file)
        return try ItemFile.decryptSecret(of: bytes, header: header, key: itemKey(for: header, keys: keys),
                                          encodedIdentity: names.encodedIdentity, path: file.path)
    }

    /// The item's attributes, read and authenticated without decrypting the secret.
    package func attributes(_ identity: ItemIdentity) throws(KeychainError) -> ItemAttributes? {
        let keys = try currentKeys()
        let names = names(identity, keys: keys)
        guard let file = try openItem(names) else { return try confirmAbsence(names, keys: keys) }
        return try readHeaderAndAttributes(file, expected: identity, keys: keys).attributes
    }

    /// The attributes of every item of a service, in no particular order.
    package func list(service: String, accessGroup: String) throws(KeychainError) -> [ItemAttributes] {
        let keys = try currentKeys()
        let name = keys.name("service", [accessGroup, service])
        guard let directory = try serviceDirectory(name, create: false) else { return [] }
        return try list(directory, named: name, keys: keys)
    }

    /// The attributes of every item in the store.
    package func listAll() throws(KeychainError) -> [ItemAttributes] {
        let keys = try currentKeys()
        var all: [ItemAttributes] = []
        for name in try items.entries() {
            guard let directory = try serviceDirectory(name, create: false) else { continue }
            all += try list(directory, named: name, keys: keys)
        }
        return all
    }

    /// Every item of a service directory, each checked to be the item its file name says and to
    /// belong to the service the directory's name says: a renamed file or a swapped directory is
    /// reported, never skipped. The directory is then known to be consistent until it changes.
    private func list(_ directory: Directory, named serviceName: String, keys: StoreKeys) throws(KeychainError) -> [ItemAttributes] {
        let stamp = try directory.stamp()
        var result: [ItemAttributes] = []
        for name in try directory.entries() where name.hasSuffix(".item") {
            guard let file = try directory.openFile(name) else { continue }
            let attributes = try readHeaderAndAttributes(file, expected: nil, keys: keys).attributes
            let expectedName = keys.name("item", [attributes.accessGroupName, attributes.service, attributes.account]) + ".item"
            guard name == expectedName else {
                throw KeychainError(.tampered, "\(file.path) holds another item: it was swapped or renamed")
            }
            guard keys.name("service", [attributes.accessGroupName, attributes.service]) == serviceName else {
                throw KeychainError(.tampered, "\(directory.path) holds an item of another service: directories or files were swapped or moved")
            }
            result.append(attributes)
        }
        if try directory.stamp() == stamp {
            caches.withLock { caches in
                if caches.consistent.count >= Caches.limit { caches.consistent.removeAll(keepingCapacity: true) }
                caches.consistent[serviceName] = stamp
            }
        }
        return result
    }

    /// Makes a miss trustworthy: an item file renamed away, or a service directory swapped with
    /// another, would otherwise read as "not found" while a listing reports tampering. The
    /// directory is checked once (every item read, as a listing does) and then only again after
    /// it changed, so repeated misses cost one fstat.
    ///
    /// - Returns: nil, when the item is genuinely absent.
    /// - Throws: ``KeychainError`` `.tampered` when the directory holds misplaced items.
    private func confirmAbsence<T>(_ names: ItemNames, keys: StoreKeys) throws(KeychainError) -> T? {
        guard let directory = try serviceDirectory(names.service, create: false) else { return nil }
        if try caches.withLock({ $0.consistent[names.service] }) == directory.stamp() { return nil }
        _ = try list(directory, named: names.service, keys: keys)
        return nil
    }

    /// Runs a write of this process to a service directory, under its lock. A directory known to
    /// be consistent before the write stays known so: the change is ours.
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

    private func readWhole(_ file: OpenFile) throws(KeychainError) -> (bytes: [UInt8], header: ItemFile.Header) {
        guard file.size >= ItemFile.headerSize, file.size <= ItemFile.maximumFileSize else {
            throw KeychainError(.tampered, "\(file.path) has an impossible size (\(file.size) bytes)")
        }
        let bytes = try file.read(count: file.size, at: 0)
        let header = try ItemFile.decodeHeader(bytes[0..<ItemFile.headerSize], fileSize: file.size, storeID: storeID, path: file.path)
        return (bytes, header)
    }

    private func readItem(_ file: OpenFile, expected: ItemIdentity, keys: StoreKeys) throws(KeychainError) -> ItemRecord {
        let (bytes, header) = try readWhole(file)
        let key = itemKey(for: header, keys: keys)
        let attributes = try ItemFile.decryptAttributes(bytes[header.attributesRange], header: header, key: key,
                                                        expected: expected, path: file.path)
        let value = try ItemFile.decryptSecret(of: bytes, header: header, key: key, identity: expected, path: file.path)
        return ItemRecord(itemID: header.itemID, generation: header.generation, attributes: attributes, value: value)
    }

    /// The header and attributes of an item, authenticated, without touching the secret section.
    private func readHeaderAndAttributes(_ file: OpenFile, expected: ItemIdentity?, keys: StoreKeys) throws(KeychainError)
        -> (header: ItemFile.Header, attributes: ItemAttributes) {
        guard file.size >= ItemFile.headerSize, file.size <= ItemFile.maximumFileSize else {
            throw KeychainError(.tampered, "\(file.path) has an impossible size (\(file.size) bytes)")
        }
        let header = try ItemFile.decodeHeader(try file.read(count: ItemFile.headerSize, at: 0)[...], fileSize: file.size,
                                               storeID: storeID, path: file.path)
        let sealed = try file.read(count: header.attributesRange.count, at: header.attributesRange.lowerBound)
        let attributes = try ItemFile.decryptAttributes(sealed[...], header: header, key: itemKey(for: header, keys: keys),
                                                        expected: expected, path: file.path)
        return (header, attributes)
    }

    // MARK: Writing

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
}

/// Fresh bytes from the system CSPRNG (getrandom).
func randomBytes(_ count: Int) -> [UInt8] {
    var generator = SystemRandomNumberGenerator()
    var bytes = [UInt8](repeating: 0, count: count)
    var index = 0
    while index < count {
        var word = generator.next()
        for _ in 0..<8 where index < count {
            bytes[index] = UInt8(truncatingIfNeeded: word)
            word >>= 8
            index += 1
        }
    }
    return bytes
}

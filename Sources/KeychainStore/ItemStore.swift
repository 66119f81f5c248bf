import Crypto
import Foundation
import Synchronization
package import TPM
#if canImport(Glibc)
import Glibc
#endif

/// An opened keychain store: a directory of sealed item files under one TPM-sealed master key.
///
///     <root>/               0700
///       store.meta          0600  format version, store ID, sealed master key, MAC
///       store.lock          0600  flock: creating or opening the store
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
    private let keys: Mutex<StoreKeys?>

    private init(root: String, storeID: [UInt8], keys: StoreKeys, durable: Bool) {
        self.root = root
        self.storeID = storeID
        self.keys = Mutex(keys)
        self.durable = durable
    }

    // MARK: Opening

    /// Opens the store at `root`, creating it (and a new master key sealed to the TPM) if absent.
    ///
    /// - Throws: ``KeychainError``: `.wrongTPM` when the store was sealed by another TPM,
    ///   `.tpmUnavailable`, `.tampered` for damaged metadata, `.unsafeFileSystem`, `.storageFailed`.
    package static func open(at root: String, tpm: TPMConfiguration, durable: Bool = true) throws(KeychainError) -> ItemStore {
        try createParents(of: root)
        try SecureFileSystem.ensureDirectory(root)
        let lock = try DirectoryLock(root + "/store.lock")
        defer { withExtendedLifetime(lock) {} }
        let metadataPath = root + "/store.meta"
        let store: ItemStore
        if let file = try SecureFileSystem.openForReading(metadataPath) {
            guard file.size <= 4096 + 128 else { throw KeychainError(.tampered, "\(metadataPath) is too large to be store metadata") }
            let (metadata, mac) = try StoreMetadata.parse(try file.read(count: file.size, at: 0), path: metadataPath)
            let masterKey = try withTPM(tpm, root: root) { try $0.unseal(metadata.sealedMasterKey) }
            let keys = masterKey.withUnsafeBytes { StoreKeys(masterKey: SymmetricKey(data: $0), storeID: metadata.storeID) }
            try metadata.verify(mac, metadataKey: keys.metadata, path: metadataPath)
            store = ItemStore(root: root, storeID: metadata.storeID, keys: keys, durable: durable)
        } else {
            let (masterKey, sealed) = try withTPM(tpm, root: root) { try $0.generateSealedKey() }
            let metadata = StoreMetadata(storeID: randomBytes(16), createdAt: Date(), sealedMasterKey: sealed)
            let keys = masterKey.withUnsafeBytes { StoreKeys(masterKey: SymmetricKey(data: $0), storeID: metadata.storeID) }
            guard try SecureFileSystem.createExclusively(metadataPath, with: metadata.serialized(metadataKey: keys.metadata)) else {
                throw KeychainError(.storageFailed, "Another process created \(metadataPath) at the same time")
            }
            store = ItemStore(root: root, storeID: metadata.storeID, keys: keys, durable: durable)
        }
        try SecureFileSystem.ensureDirectory(root + "/items")
        return store
    }

    /// Whether a store was ever created at `root` (its metadata exists), without opening it.
    package static func exists(at root: String) -> Bool {
        SecureFileSystem.directoryExists(root) && access(root + "/store.meta", F_OK) == 0
    }

    /// Erases the keys from memory; later calls throw `.storeClosed`.
    package func close() {
        keys.withLock { $0 = nil }
    }

    private static func withTPM<R: Sendable>(_ configuration: TPMConfiguration, root: String,
                                             _ body: (TPMConnection) throws -> R) throws(KeychainError) -> R {
        do {
            let tpm = try TPMConnection(configuration)
            defer { tpm.close() }
            return try body(tpm)
        } catch let error as TPMError {
            throw KeychainError(tpmError: error, store: root)
        } catch {
            throw KeychainError(.tpmUnavailable, "The TPM failed", underlying: error)
        }
    }

    private static func createParents(of root: String) throws(KeychainError) {
        guard root.hasPrefix("/") else {
            throw KeychainError(.invalidParameter, "The store path must be absolute: \(root)")
        }
        var path = ""
        for component in root.split(separator: "/").dropLast() {
            path += "/" + component
            if !SecureFileSystem.directoryExists(path) {
                try SecureFileSystem.ensureDirectory(path)
            }
        }
    }

    private func currentKeys() throws(KeychainError) -> StoreKeys {
        guard let current = keys.withLock({ $0 }) else {
            throw KeychainError(.storeClosed, "The keychain store at \(root) is closed")
        }
        return current
    }

    // MARK: Paths

    private func serviceDirectory(_ accessGroup: String, _ service: String, keys: StoreKeys) -> String {
        root + "/items/" + keys.name("service", [accessGroup, service])
    }

    private func itemPath(_ identity: ItemIdentity, keys: StoreKeys) -> String {
        serviceDirectory(identity.accessGroup, identity.service, keys: keys) + "/"
            + keys.name("item", [identity.accessGroup, identity.service, identity.account]) + ".item"
    }

    // MARK: Reading

    /// The item with its secret, or nil when there is none.
    ///
    /// - Throws: ``KeychainError`` `.tampered` (never wrong data), `.unsafeFileSystem`, `.storageFailed`.
    package func item(_ identity: ItemIdentity) throws(KeychainError) -> ItemRecord? {
        let keys = try currentKeys()
        return try readItem(at: itemPath(identity, keys: keys), expected: identity, keys: keys)
    }

    /// The item's attributes, read and authenticated without decrypting the secret.
    package func attributes(_ identity: ItemIdentity) throws(KeychainError) -> ItemAttributes? {
        let keys = try currentKeys()
        return try readAttributes(at: itemPath(identity, keys: keys), expected: identity, keys: keys)
    }

    /// The attributes of every item of a service, in no particular order.
    package func list(service: String, accessGroup: String) throws(KeychainError) -> [ItemAttributes] {
        let keys = try currentKeys()
        return try listDirectory(serviceDirectory(accessGroup, service, keys: keys), keys: keys)
            .filter { $0.service == service && $0.accessGroupName == accessGroup }
    }

    /// The attributes of every item in the store.
    package func listAll() throws(KeychainError) -> [ItemAttributes] {
        let keys = try currentKeys()
        var all: [ItemAttributes] = []
        for directory in try SecureFileSystem.entries(of: root + "/items") {
            let path = root + "/items/" + directory
            try SecureFileSystem.ensureDirectory(path, create: false)
            let items = try listDirectory(path, keys: keys)
            for item in items where keys.name("service", [item.accessGroupName, item.service]) != directory {
                throw KeychainError(.tampered, "\(path) holds an item of another service: files were moved")
            }
            all += items
        }
        return all
    }

    private func listDirectory(_ directory: String, keys: StoreKeys) throws(KeychainError) -> [ItemAttributes] {
        var result: [ItemAttributes] = []
        for name in try SecureFileSystem.entries(of: directory) where name.hasSuffix(".item") {
            let path = directory + "/" + name
            guard let attributes = try readAttributes(at: path, expected: nil, keys: keys) else { continue }
            let expectedName = keys.name("item", [attributes.accessGroupName, attributes.service, attributes.account]) + ".item"
            guard name == expectedName else {
                throw KeychainError(.tampered, "\(path) holds another item: it was swapped or renamed")
            }
            result.append(attributes)
        }
        return result
    }

    private func readItem(at path: String, expected: ItemIdentity, keys: StoreKeys) throws(KeychainError) -> ItemRecord? {
        guard try SecureFileSystem.checkDirectoryIfPresent(SecureFileSystem.parentDirectory(of: path)),
              let file = try SecureFileSystem.openForReading(path) else { return nil }
        guard file.size >= ItemFile.headerSize, file.size <= ItemFile.maximumFileSize else {
            throw KeychainError(.tampered, "\(path) has an impossible size (\(file.size) bytes)")
        }
        let bytes = try file.read(count: file.size, at: 0)
        let header = try ItemFile.decodeHeader(Array(bytes[0..<ItemFile.headerSize]), fileSize: file.size, storeID: storeID, path: path)
        let attributes = try ItemFile.decryptAttributes(Array(bytes[header.attributesRange]), header: header, keys: keys,
                                                        expected: expected, path: path)
        let value = try ItemFile.decryptSecret(Array(bytes[header.secretRange]), header: header, keys: keys, path: path)
        return ItemRecord(itemID: header.itemID, generation: header.generation, attributes: attributes, value: value)
    }

    private func readAttributes(at path: String, expected: ItemIdentity?, keys: StoreKeys) throws(KeychainError) -> ItemAttributes? {
        guard try SecureFileSystem.checkDirectoryIfPresent(SecureFileSystem.parentDirectory(of: path)),
              let file = try SecureFileSystem.openForReading(path) else { return nil }
        guard file.size >= ItemFile.headerSize, file.size <= ItemFile.maximumFileSize else {
            throw KeychainError(.tampered, "\(path) has an impossible size (\(file.size) bytes)")
        }
        let header = try ItemFile.decodeHeader(try file.read(count: ItemFile.headerSize, at: 0), fileSize: file.size,
                                               storeID: storeID, path: path)
        let sealed = try file.read(count: header.attributesRange.count, at: header.attributesRange.lowerBound)
        return try ItemFile.decryptAttributes(sealed, header: header, keys: keys, expected: expected, path: path)
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
        let directory = serviceDirectory(identity.accessGroup, identity.service, keys: keys)
        try SecureFileSystem.ensureDirectory(directory)
        let lock = try DirectoryLock(directory + "/.lock")
        defer { withExtendedLifetime(lock) {} }

        let path = itemPath(identity, keys: keys)
        let existing = try readItem(at: path, expected: identity, keys: keys)
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
        try SecureFileSystem.replace(path, with: bytes, durable: durable)
    }

    /// Deletes one item. - Returns: false if it did not exist.
    package func delete(_ identity: ItemIdentity) throws(KeychainError) -> Bool {
        let keys = try currentKeys()
        let directory = serviceDirectory(identity.accessGroup, identity.service, keys: keys)
        guard SecureFileSystem.directoryExists(directory) else { return false }
        let lock = try DirectoryLock(directory + "/.lock")
        defer { withExtendedLifetime(lock) {} }
        return try SecureFileSystem.remove(itemPath(identity, keys: keys), durable: durable)
    }

    /// Deletes every item of a service. - Returns: how many were deleted.
    package func deleteAll(service: String, accessGroup: String) throws(KeychainError) -> Int {
        let keys = try currentKeys()
        let directory = serviceDirectory(accessGroup, service, keys: keys)
        guard SecureFileSystem.directoryExists(directory) else { return 0 }
        let lock = try DirectoryLock(directory + "/.lock")
        defer { withExtendedLifetime(lock) {} }
        var removed = 0
        for name in try SecureFileSystem.entries(of: directory) {
            if name.hasSuffix(".item") {
                if try SecureFileSystem.remove(directory + "/" + name, durable: false) { removed += 1 }
            } else if name.hasSuffix(SecureFileSystem.temporarySuffix) {
                _ = try SecureFileSystem.remove(directory + "/" + name, durable: false)
            }
        }
        if durable && removed > 0 { try SecureFileSystem.syncDirectory(directory) }
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

extension KeychainError {
    /// The store's view of a TPM failure.
    init(tpmError error: TPMError, store: String) {
        switch error.code {
        case .wrongStorageKey:
            self.init(.wrongTPM, "The keychain at \(store) was sealed by another TPM (it was copied from another machine, or this TPM was cleared); it cannot be opened here", underlying: error)
        case .tpmUnavailable, .busy:
            self.init(.tpmUnavailable, "The keychain at \(store) needs the TPM, which cannot be reached", underlying: error)
        case .authorizationFailed, .policyCheckFailed:
            self.init(.authenticationFailed, "The TPM refused to unseal the keychain's key", underlying: error)
        case .lockout:
            self.init(.lockout, "The TPM is in dictionary-attack lockout", underlying: error)
        case .malformedData:
            self.init(.tampered, "The keychain's sealed master key is damaged", underlying: error)
        default:
            self.init(.tpmUnavailable, "The TPM failed while opening the keychain at \(store)", underlying: error)
        }
    }
}

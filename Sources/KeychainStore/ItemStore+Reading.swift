import Crypto
import Foundation
import SystemCalls
#if canImport(Glibc)
import Glibc
#endif

// The read path: lookups, listings, and the checks that make a miss trustworthy. Readers take no
// lock: files are replaced by rename, so a reader sees the old item or the new one.
extension ItemStore {
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
    func list(_ directory: Directory, named serviceName: String, keys: StoreKeys) throws(KeychainError) -> [ItemAttributes] {
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
    func confirmAbsence<T>(_ names: ItemNames, keys: StoreKeys) throws(KeychainError) -> T? {
        guard let directory = try serviceDirectory(names.service, create: false) else { return nil }
        if try caches.withLock({ $0.consistent[names.service] }) == directory.stamp() { return nil }
        _ = try list(directory, named: names.service, keys: keys)
        return nil
    }

    /// Runs a write of this process to a service directory, under its lock. A directory known to
    /// be consistent before the write stays known so: the change is ours.
    func readWhole(_ file: OpenFile) throws(KeychainError) -> (bytes: [UInt8], header: ItemFile.Header) {
        guard file.size >= ItemFile.headerSize, file.size <= ItemFile.maximumFileSize else {
            throw KeychainError(.tampered, "\(file.path) has an impossible size (\(file.size) bytes)")
        }
        let bytes = try file.read(count: file.size, at: 0)
        let header = try ItemFile.decodeHeader(bytes[0..<ItemFile.headerSize], fileSize: file.size, storeID: storeID, path: file.path)
        return (bytes, header)
    }

    func readItem(_ file: OpenFile, expected: ItemIdentity, keys: StoreKeys) throws(KeychainError) -> ItemRecord {
        let (bytes, header) = try readWhole(file)
        let key = itemKey(for: header, keys: keys)
        let attributes = try ItemFile.decryptAttributes(bytes[header.attributesRange], header: header, key: key,
                                                        expected: expected, path: file.path)
        let value = try ItemFile.decryptSecret(of: bytes, header: header, key: key, identity: expected, path: file.path)
        return ItemRecord(itemID: header.itemID, generation: header.generation, attributes: attributes, value: value)
    }

    /// The header and attributes of an item, authenticated, without touching the secret section.
    func readHeaderAndAttributes(_ file: OpenFile, expected: ItemIdentity?, keys: StoreKeys) throws(KeychainError)
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
}

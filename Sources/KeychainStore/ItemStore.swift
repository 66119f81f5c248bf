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
    let caches = Mutex(Caches())

    /// What a get would otherwise recompute or reopen: two HMACs for the names, an HKDF for the
    /// key, and the service directory (opened and verified once). All bounded, all emptied by
    /// ``close()``. A cached item key is found by its write's random salt, so a hit means the same
    /// file version; GCM still authenticates every byte.
    struct Caches {
        static let limit = 4096
        var names: [ItemIdentity: ItemNames] = [:]
        var itemKeys: [[UInt8]: SymmetricKey] = [:]
        var services: [String: Directory] = [:]
        /// Service directories whose every item file was read and found where it belongs, with
        /// the directory's stamp at the time: a miss in one is genuine while the stamp holds.
        var consistent: [String: Directory.Stamp] = [:]
    }

    /// An item's directory and file name inside `items/`, and its identity as the secret's AAD encodes it.
    struct ItemNames {
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

    func currentKeys() throws(KeychainError) -> StoreKeys {
        guard let current = keys.withLock({ $0 }) else {
            throw KeychainError(.storeClosed, "The keychain store at \(root) is closed")
        }
        return current
    }

    // MARK: Names and directories

    func names(_ identity: ItemIdentity, keys: StoreKeys) -> ItemNames {
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
    func serviceDirectory(_ name: String, create: Bool) throws(KeychainError) -> Directory? {
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
    func openItem(_ names: ItemNames) throws(KeychainError) -> OpenFile? {
        try serviceDirectory(names.service, create: false)?.openFile(names.file)
    }

    /// The item key of the write that produced `header`.
    func itemKey(for header: ItemFile.Header, keys: StoreKeys) -> SymmetricKey {
        if let cached = caches.withLock({ $0.itemKeys[header.salt] }) { return cached }
        let key = keys.itemKey(salt: header.salt, storeID: header.storeID)
        caches.withLock { caches in
            if caches.itemKeys.count >= Caches.limit { caches.itemKeys.removeAll(keepingCapacity: true) }
            caches.itemKeys[header.salt] = key
        }
        return key
    }
}

/// Fresh bytes from the system CSPRNG (getrandom), through the one path every target uses.
func randomBytes(_ count: Int) -> [UInt8] {
    SystemRandom.bytes(count)
}

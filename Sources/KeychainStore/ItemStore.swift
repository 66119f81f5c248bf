import Crypto
import FoundationEssentials
import KeychainVocabulary
import SystemCalls
package import TPM
import WireFormat

#if canImport(Glibc)
import Glibc
#endif

/// An opened keychain store: a directory of sealed item files under one TPM-sealed master key.
///
///     <root>/               0700  flock on the directory itself: opening (exclusive), writing
///                                 (shared), upgrading the format or rotating the key (exclusive)
///       store.meta          0600  format version, store ID, sealed master key, MAC
///       storage-key.context 0600  the TPM context of the storage key, to skip deriving it again
///       items2/             0700  format 2 (items/ in a format-1 store; items2-<tag>/ once the
///                                 master key was rotated, see ItemStore+Rotation.swift)
///         <group>/          0700  HMAC(names key, class, access group, service), 32 hex digits
///           .lock           0600  flock: writers of this group, across processes
///           <item>.item     0600  HMAC(names key, the class's primary key) + ".item"
///           <item>.item.tmp       only while written, or left by a writer that died
///
/// The TPM unseals the master key when the store is opened; after that it is asked only for what
/// needs it (a protected item's key record, the rollback counter's epochs, a key rotation or a
/// recovery), and everything else is file I/O and AES-GCM. Readers take no lock: files are replaced by rename, so a
/// reader sees the old item or the new one. Writers hold the store lock shared and their
/// group's lock; the upgrade from format 1 holds the store lock exclusively.
package final class ItemStore: Sendable {
    package let root: String
    package let storeID: [UInt8]
    /// Off only where a benchmark fills a store with many items it will not need after a crash.
    package let durable: Bool
    let rootDirectory: Directory
    private let state: Locked<OpenState?>
    /// What a get would otherwise recompute or reopen, each cache with its own lock: the names
    /// (two HMACs), the group directories and held item files, the decryptions (an HKDF per item
    /// key; what listings and this process's writes decrypted), the key records, the lock files.
    let nameCache = ItemNameCache()
    let groupDirectories = GroupDirectoryCache()
    let decryptions = DecryptionCache()
    let keyRecords = KeyRecordCache()
    let lockPool = LockPool()
    /// The manifest as last read and its lock (for a store without a counter, it checks nothing).
    let rollback: RollbackGuard

    /// What an open store needs on every operation, read under one lock: nil once closed.
    struct OpenState: Sendable {
        var keys: StoreKeys
        var layout: Layout
        /// The version (inode and change time) of the store.meta these keys came from: another
        /// one there means another process rotated the master key (see ItemStore+Rotation.swift).
        /// The inode number alone came back after two rotations in a row, and a writer that slept
        /// through them wrote into the directories of a key already removed.
        var metadataIdentity: FileIdentity
    }

    /// Where the items and key records are and in which format; changes when the store is
    /// upgraded, and with every master key (each key generation has its own directories).
    struct Layout: Sendable {
        let version: UInt16
        let items: Directory
        /// The name of the key records' directory (it is created with the first record).
        var records: String = KeyRecord.directoryName
        /// The name of the manifest, in the store's root (used only by rollback-protected stores).
        var manifest: String = Manifest.fileName
    }

    /// How many entries each cache keeps before it starts again: all bounded, all emptied by
    /// ``close()``, with every master key and by an upgrade.
    static let cacheLimit = 4096
    /// What a listing's decryptions keep: enough for a listing of this many items.
    static let listingLimit = 16_384
    /// What this process's last writes sealed: the last this many items written.
    static let writtenLimit = 64

    /// An item's group directory and file name, and its identity as the secret's AAD encodes it,
    /// for one format version.
    struct ItemNames {
        let version: UInt16
        let group: String
        let file: String
        let encodedIdentity: [UInt8]
        /// The file's key in a manifest (format 2), computed once with the names.
        var manifestKey: Manifest.ItemKey? = nil
    }

    /// The longest a writer waits for another process's lock of a group or of the store.
    let lockTimeout: Duration
    /// The TPM for the work after opening that needs one: sealing a rotated master key, and
    /// unsealing the key another process rotated to.
    let lendTPM: TPMLender

    /// A TPM for one unit of work: a simulated one may be started for it and stopped by `release`.
    package struct TPMLease: Sendable {
        package let configuration: TPMConfiguration
        package let release: @Sendable () -> Void

        package init(configuration: TPMConfiguration, release: @escaping @Sendable () -> Void = {}) {
            self.configuration = configuration
            self.release = release
        }
    }

    init(
        root: Directory, storeID: [UInt8], layout: Layout, keys: StoreKeys, metadataIdentity: FileIdentity,
        durable: Bool,
        lockTimeout: Duration, lendTPM: @escaping TPMLender, rollback: RollbackGuard.State? = nil
    ) {
        self.rollback = RollbackGuard(rollback, root: root, lockTimeout: lockTimeout)
        self.root = root.path
        self.rootDirectory = root
        self.storeID = storeID
        self.state = Locked(OpenState(keys: keys, layout: layout, metadataIdentity: metadataIdentity))
        self.durable = durable
        self.lockTimeout = lockTimeout
        self.lendTPM = lendTPM
    }

    /// Runs `body` with a TPM lent for it.
    func withLentTPM<R>(_ body: (TPMConfiguration) throws(KeychainError) -> R) throws(KeychainError) -> R {
        let lease = try lendTPM()
        defer { lease.release() }
        return try body(lease.configuration)
    }

    /// Erases the keys from memory; later calls throw `.storeClosed`.
    package func close() {
        state.withLock { $0 = nil }
        forgetCaches()
        rollback.replace(with: nil)
    }

    /// The store's format version as this process sees it (1 until the first write upgrades it).
    package var formatVersion: UInt16? { state.withLock { $0?.layout.version } }

    func current() throws(KeychainError) -> OpenState {
        guard let current = state.withLock({ $0 }) else {
            throw KeychainError(.storeClosed, "The keychain store at \(root) is closed")
        }
        return current
    }

    /// Switches to `layout` (after an upgrade, by this process or another) and forgets
    /// everything cached about the old one.
    func adopt(_ layout: Layout) {
        state.withLock { state in state?.layout = layout }
        forgetCaches()
    }

    /// Switches to another master key's keys and layout (after a rotation, by this process or
    /// another) and forgets everything cached under the old ones.
    func adopt(_ replacement: OpenState) {
        state.withLock { state in if state != nil { state = replacement } }
        forgetCaches()
    }

    /// Empties every cache: the store closed, its master key or its format changed.
    func forgetCaches() {
        nameCache.removeAll()
        groupDirectories.removeAll()
        decryptions.removeAll()
        keyRecords.removeAll()
        lockPool.removeAll()
    }

    // MARK: Names and directories

    func names(_ identity: ItemIdentity, _ state: OpenState) -> ItemNames {
        if let cached = nameCache.names(of: identity), cached.version == state.layout.version {
            return cached
        }
        let keys = state.keys
        let names: ItemNames
        if state.layout.version == 1 {
            names = ItemNames(
                version: 1, group: keys.name("service", [identity.accessGroup, identity.service]),
                file: keys.name("item", [identity.accessGroup, identity.service, identity.account]) + ".item",
                encodedIdentity: ItemFileV1.encode(identity))
        } else {
            let attributes = AttributeList(identity)
            let file = ItemFileV2.fileName(of: .genericPassword, attributes, keys: keys)
            names = ItemNames(
                version: 2, group: ItemFileV2.groupName(of: .genericPassword, attributes, keys: keys),
                file: file, encodedIdentity: ItemClass.genericPassword.encodedPrimaryKey(of: attributes),
                manifestKey: Manifest.ItemKey(fileName: file))
        }
        nameCache.remember(names, of: identity)
        return names
    }

    /// The name of the group directory of a service, in the current format.
    func groupName(service: String, accessGroup: String, _ state: OpenState) -> String {
        if state.layout.version == 1 { return state.keys.name("service", [accessGroup, service]) }
        var attributes = AttributeList()
        attributes.setString(service, for: AttributeTag.service)
        if !accessGroup.isEmpty { attributes.setString(accessGroup, for: AttributeTag.accessGroup) }
        return ItemFileV2.groupName(of: .genericPassword, attributes, keys: state.keys)
    }

    /// The group's directory: opened once, re-checked (fstat) on every use, and opened (or
    /// created) again if it was removed from the file system meanwhile.
    func groupDirectory(_ name: String, create: Bool, _ state: OpenState) throws(KeychainError) -> Directory? {
        if let cached = groupDirectories.directory(name) {
            if try cached.revalidate() { return cached }
            forgetGroupDirectory(name)
        }
        guard let opened = try Directory.open(name, in: state.layout.items, create: create) else { return nil }
        groupDirectories.remember(opened, named: name)
        return opened
    }

    private func forgetGroupDirectory(_ name: String) {
        groupDirectories.forget(name)
    }

    /// Whether the directory this store opened is still the one at its path: false once the
    /// store was removed, or removed and made again there, by any process. One stat and one
    /// fstat: a process that keeps stores open for others (the session holder) asks it before
    /// each answer, since its open store would otherwise answer for a store that is gone.
    package func isStillAtItsPath() -> Bool {
        var atPath = stat()
        var held = stat()
        guard stat(root, &atPath) == 0, fstat(rootDirectory.descriptor, &held) == 0 else { return false }
        return held.st_nlink > 0 && atPath.st_dev == held.st_dev && atPath.st_ino == held.st_ino
    }

    /// The item's file, or nil: the held one while nothing can have put another file at its name
    /// (``HeldItemFile``), else opened, and held for the next get.
    func openItem(_ names: ItemNames, _ state: OpenState) throws(KeychainError) -> OpenFile? {
        let key = HeldItemFile.Key(group: names.group, file: names.file)
        let (cached, held) = groupDirectories.directoryAndHeldFile(key)
        if let cached, let stamp = try cached.revalidatedStamp() {
            return try openItemFile(key, in: cached, stamp: stamp, held: held)
        }
        if cached != nil { forgetGroupDirectory(names.group) }
        guard let directory = try groupDirectory(names.group, create: false, state) else { return nil }
        return try openItemFile(key, in: directory, stamp: nil, held: held)
    }

    /// The item file `key` of `directory` (the group's open directory, already checked; `stamp`
    /// its stamp from that check, nil when not at hand): through `held` while nothing can have
    /// put another file at its name, else opened and held in its place.
    func openItemFile(
        _ key: HeldItemFile.Key, in directory: Directory, stamp: Directory.Stamp?, held: HeldItemFile?
    ) throws(KeychainError) -> OpenFile? {
        // A check by name (the open's or the held file's) made after `stamp` was read vouches for
        // that stamp once it has settled: later changes of the directory cannot leave it. Asked
        // only then: a get checked by stamp does not read the clock.
        func settled() -> Directory.Stamp? { stamp.flatMap { HeldItemFile.isSettled($0) ? $0 : nil } }
        if let held, held.directory === directory, let (file, checkedByName) = try held.reopen(directoryStamp: stamp) {
            if checkedByName, let settled = settled() {
                groupDirectories.hold(
                    HeldItemFile(directory: directory, name: key.file, file: held.file, stamp: settled), for: key)
            }
            return file
        }
        let file = try directory.openFile(key.file)
        if held != nil || file != nil {
            let stamp = settled()
            groupDirectories.hold(
                file.map { HeldItemFile(directory: directory, name: key.file, file: $0, stamp: stamp) }, for: key)
        }
        return file
    }

    /// The item key of the write with `salt`, derived by `derive` on a cache miss.
    func itemKey(salt: ArraySlice<UInt8>, _ derive: () -> SymmetricKey) -> SymmetricKey {
        let salt = WriteSalt(salt)
        return decryptions.itemKey(salt, derive: derive)
    }
}

/// Fresh bytes from the system CSPRNG (getrandom), through the one path every target uses.
func randomBytes(_ count: Int) -> [UInt8] {
    SystemRandom.bytes(count)
}

import FoundationEssentials
import KeychainStore
public import KeychainVocabulary

#if canImport(Glibc)
import Glibc
#endif

/// What ``KeychainLocation/rotateKeys(context:)`` did.
public struct KeyRotation: Sendable, Equatable {
    /// Items re-encrypted under the new master key.
    public let items: Int
    /// Key records (one per protection in use) carried over to the new key.
    public let keyRecords: Int
}

/// What ``KeychainLocation/purgeInvalidatedItems()`` deleted.
public struct PurgeReport: Sendable, Equatable {
    /// Items that could never be read again, deleted.
    public let items: Int
    /// Their key records, deleted.
    public let keyRecords: Int
}

// Named stores: create, list and remove whole stores (SAP's KeychainStorage and the CLI's
// create-keychain, list-keychains and delete-keychain build on these).
extension KeychainLocation {
    /// Creates the store here now (a new master key sealed to the TPM) rather than on first use.
    ///
    /// - Throws: ``KeychainError`` `.duplicateItem` when a store exists here, and what opening a
    ///   store throws (`.tpmUnavailable`, `.invalidParameter` for a directory holding something else).
    public func createStore() throws(KeychainError) {
        guard !storeExists else { throw KeychainError(.duplicateItem, "A keychain store already exists at \(path)") }
        _ = try OpenStores.store(at: self)
    }

    /// Creates the store here, shared by the members of the Unix group `group`: its directories
    /// are group-owned with mode 2770 and its files 0660, and every member may read and write
    /// its items (others are refused by the file system, and a file of another group or with
    /// access for others is refused as unsafe). This user must be a member, and the parent
    /// directory must exist and be reachable by the members.
    ///
    /// What the group shares is the files; the TPM must be reachable by every member too (a
    /// hardware TPM through `/dev/tpmrm0`, or `TPM_KEYCHAIN_TCTI`), not the CLI's simulator kept
    /// inside a store. Items protected by access control are bound to the device (passcode,
    /// enrollment) of the member who wrote them.
    ///
    /// - Throws: ``KeychainError`` `.duplicateItem` when a store exists here, `.invalidParameter`
    ///   for an unknown group or a missing parent, `.permissionDenied` when this user is not a
    ///   member, and what opening a store throws.
    public func createStore(sharedWithGroup group: String) throws(KeychainError) {
        guard !storeExists else { throw KeychainError(.duplicateItem, "A keychain store already exists at \(path)") }
        let gid = try Self.memberGroupID(group)
        let tpm = try StoreTPM.choose(for: self)
        defer { tpm.stop() }
        let store = try ItemStore.open(
            at: path, tpm: tpm.configuration, sharedGroup: gid, tpmKind: tpm.kindForNewStore)
        store.close()
    }

    /// The ID of `group`, which this process must be a member of.
    private static func memberGroupID(_ name: String) throws(KeychainError) -> UInt32 {
        var entry = Glibc.group()
        var result: UnsafeMutablePointer<Glibc.group>?
        var buffer = [CChar](repeating: 0, count: 16384)
        guard getgrnam_r(name, &entry, &buffer, buffer.count, &result) == 0, result != nil else {
            throw KeychainError(.invalidParameter, "There is no group named \(name)")
        }
        let gid = entry.gr_gid
        var groups = [gid_t](repeating: 0, count: Int(max(getgroups(0, nil), 0)) + 1)
        let count = getgroups(Int32(groups.count), &groups)
        guard getegid() == gid || (count > 0 && groups.prefix(Int(count)).contains(gid)) else {
            throw KeychainError(
                .permissionDenied,
                "This user is not a member of group \(name): a shared store can only be created for a group one belongs to"
            )
        }
        return gid
    }

    /// Removes the store here: its keys are erased from this process's memory, then its directory
    /// is renamed away (one atomic step: no process ever opens half a store) and deleted. Other
    /// stores are untouched; users of this one elsewhere fail with `.storeNotFound` or `.storeClosed`.
    ///
    /// - Throws: ``KeychainError`` `.storeNotFound`, `.storageFailed`.
    public func removeStore() throws(KeychainError) {
        try checkStore()
        // The store's rollback counter goes too, when the store opens (its metadata authenticated,
        // so a planted store.meta cannot name another store's counter); a store that does not open
        // is removed all the same, and its counter, if any, stays defined (tpm2_nvundefine removes it).
        if let store = try? OpenStores.store(at: self), let index = store.rollbackCounterIndex {
            store.undefineCounter(index)
        }
        OpenStores.close(self)
        let doomed =
            URL(fileURLWithPath: path).deletingLastPathComponent().path + "/."
            + URL(fileURLWithPath: path).lastPathComponent
            + ".removed-"
            + UUID().uuidString
        do {
            try FileManager.default.moveItem(atPath: path, toPath: doomed)
            try FileManager.default.removeItem(atPath: doomed)
        } catch {
            throw KeychainError(.storageFailed, "Cannot remove the keychain store at \(path)", underlying: error)
        }
    }

    /// Rotates the master key, opening protected items' key records through `proofs`:
    /// ``rotateKeys(context:)`` (TPMKeychain) is the public entry.
    package func rotateKeys(proofs context: (any ProofSource)?) async throws(KeychainError) -> KeyRotation {
        try checkStore()
        let store = try OpenStores.store(at: self)
        var recordKeys: [ItemStore.RecordKey] = []
        for protection in try store.protectionsInUse() {
            guard let context else {
                throw KeychainError(
                    .interactionNotAllowed,
                    "The keychain at \(path) holds protected items: rotating its master key re-encrypts them, which needs an authentication context"
                )
            }
            switch await Self.openForRotation(protection, context: context, store: store, location: self) {
            case .success(let key?): recordKeys.append(key)
            case .success(nil): continue
            case .failure(let error): throw error
            }
        }
        let rotation = try store.rotateMasterKey(recordKeys: recordKeys)
        return KeyRotation(items: rotation.items, keyRecords: rotation.records)
    }

    /// A record opened for a rotation (nil when it needs no opening).
    private static func openForRotation(
        _ protection: ItemStore.ItemProtection, context: any ProofSource, store: ItemStore,
        location: KeychainLocation
    ) async -> Result<ItemStore.RecordKey?, KeychainError> {
        do throws(KeychainError) {
            return .success(try await context.recordKey(for: protection, store: store, location: location))
        } catch  where error.code == .itemInvalidated {
            return .failure(
                KeychainError(
                    .itemInvalidated,
                    "The keychain at \(location.path) holds items that can never open again, which a rotation cannot re-encrypt: remove them first (purgeInvalidatedItems())",
                    underlying: error))
        } catch {
            return .failure(error)
        }
    }

    /// Deletes the items of this store that can never be read again on this device, and their
    /// key records, after proving it with the TPM's counters: items bound to a biometric enrollment
    /// that changed since (biometryCurrentSet, without the passcode as another way in), and items
    /// that needed a device passcode this device has removed since. Reads never delete such items
    /// (the reader may see another device's state); this is the explicit way to.
    ///
    /// Items of another device (another member of a shared store, another state directory), and
    /// items whose counters are missing from the TPM (nothing can be proven), are kept.
    ///
    /// - Throws: ``KeychainError`` `.storeNotFound`, `.tpmUnavailable`, `.tampered`, `.storageFailed`.
    @discardableResult
    public func purgeInvalidatedItems() throws(KeychainError) -> PurgeReport {
        try checkStore()
        let store = try OpenStores.store(at: self)
        let purge = try Devices.with(self) { (device) throws(KeychainError) in
            try store.purgeInvalidated(device: device)
        }
        return PurgeReport(items: purge.items, keyRecords: purge.records)
    }

    /// The names of the stores in `directory` (by default ``dataDirectory``, where
    /// ``named(_:tcti:)`` puts them), sorted; found without the TPM.
    public static func storeNames(in directory: String = dataDirectory) -> [String] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return entries.filter { name in
            !name.hasPrefix(".") && ((try? KeychainLocation(path: directory + "/" + name))?.storeExists ?? false)
        }.sorted()
    }
}

extension KeychainLocation {
    /// Whether a store detects rollback and deletion of its files, and with which TPM counter.
    public struct RollbackProtection: Sendable, Equatable {
        /// The NV index of the store's counter in the TPM.
        public let counterIndex: UInt32
        /// The manifest's latest epoch: the counter's value since the last writer began its epoch.
        public let epoch: UInt64
    }

    /// The store's rollback protection, or nil when it has none (its TPM had no room for a
    /// counter, or no usable owner hierarchy). Opens the store (one TPM unseal, if not open yet).
    ///
    /// - Throws: ``KeychainError`` as opening does: `.storeNotFound`, `.rolledBack`,
    ///   `.rollbackCounterMissing`, `.wrongTPM`, `.tpmUnavailable`.
    public func rollbackProtection() throws(KeychainError) -> RollbackProtection? {
        try checkStore()
        let store = try OpenStores.store(at: self)
        guard let index = store.rollbackCounterIndex, let epoch = store.manifestEpoch else { return nil }
        return RollbackProtection(counterIndex: index, epoch: epoch)
    }
}

extension KeychainLocation {
    /// Whether this user's private stores are bound to them as they are created or opened (the
    /// enrollment helper gives a binding secret; docs/SECURITY.md, "User binding"), and why not.
    public static var userBinding: (bound: Bool, reason: String) {
        UserBinding.availability()
    }
}

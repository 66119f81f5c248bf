import Crypto
import FoundationEssentials
package import KeychainVocabulary
import SystemCalls
import TPM

#if canImport(Glibc)
import Glibc
#endif

// Rollback and deletion detection (docs/FORMAT.md, "Manifest"; docs/SECURITY.md, "Rollback").
//
// A protected store keeps a manifest: the generation of every item file, in records chained by
// MACs, and epoch records holding values of a TPM NV counter only the master key can move. Every
// read checks the item's generation against the manifest; opening checks the manifest's latest
// epoch against the counter. So an item file, a group directory or the whole store put back from
// an older copy, or an item file deleted, is reported (`.rolledBack`) instead of read.
//
// Costs, and why they are where they are:
// - A write appends its records without fsync: "S" after the rename, and "W" before it only for
//   an item the manifest does not list as live (an upsert of a listed item appends one record).
//   The item file itself is durable first; after a crash a file newer than the manifest is the
//   write the manifest missed, and is accepted (a generation above the manifest's is one nobody
//   can have restored: it was never recorded).
// - A delete appends its record durably before unlinking: a missing file must never be confused
//   with a delete the manifest missed.
// - The counter moves once per epoch, not per write: at a handle's first write, and again on a
//   write once its epoch is ten minutes old. NV write endurance on hardware TPMs is the reason.
extension ItemStore {
    /// Where new counters are defined: 2,097,152 handles in the upper half of the NV range no one
    /// has registered (0x01800000 to 0x01BFFFFF, where the device's indices also are, see
    /// ``DeviceIndices``); a taken one is skipped.
    static let counterRange: Range<UInt32> = 0x01A0_0000..<0x01C0_0000
    /// Where counters were defined before (space the TCG registry reserves for others): a store
    /// keeps the counter store.meta names wherever it is, and one found without a counter is also
    /// asked about these handles.
    static let legacyCounterRange: Range<UInt32> = 0x0155_0000..<0x0156_0000

    /// Whether the store detects rollback and deletion (it has a counter in the TPM and a manifest).
    package var isRollbackProtected: Bool { rollback.isProtected }
    /// The NV index of the store's rollback counter, or nil.
    package var rollbackCounterIndex: UInt32? { rollback.counterIndex }
    /// The latest epoch in the manifest as this handle last read it: the counter's value since
    /// the last epoch began (one more while a writer that died between the two is not yet followed).
    package var manifestEpoch: UInt64? { rollback.epoch }

    /// The rollback counter's value in the TPM, or nil for a store without one.
    package func rollbackCounterValue() throws(KeychainError) -> UInt64? {
        guard let index = rollbackCounterIndex else { return nil }
        let keys = try current().keys
        return try withLentTPM { (configuration) throws(KeychainError) in
            try Self.withTPM(configuration, root: root, cache: nil) {
                try Self.readCounter(index, keys: keys, tpm: $0, store: root)
            }
        }
    }

    // MARK: Reading

    /// Checks an item file's generation against the manifest. A disagreement is looked at again
    /// under the group's lock, with the manifest re-read: a writer between its rename and its
    /// record (or a delete and a re-add) makes a reader's view briefly disagree, and the version
    /// that reader got was current when it read it. Only a file that still disagrees once no
    /// writer is at work is reported.
    ///
    /// - Parameter groupLocked: the caller holds the group's lock (a writer): no race to wait out.
    /// - Returns: false when the file is what an interrupted delete left: the item is gone.
    /// - Throws: ``KeychainError`` `.rolledBack` for an older generation than recorded, or a
    ///   deleted item put back.
    func checkGeneration(
        _ generation: UInt64, file: String, key: Manifest.ItemKey? = nil, group: String, path: String,
        in items: Directory,
        groupLocked: Bool = false
    ) throws(KeychainError) -> Bool {
        guard let file = key ?? Manifest.ItemKey(fileName: file), let verdict = rollback.verdict(generation, file: file)
        else {
            return true
        }
        if verdict == .current { return true }
        try refreshManifest()
        var settled = rollback.verdict(generation, file: file) ?? .current
        if settled != .current && settled != .deleted && !groupLocked {
            let lock = try groupLock(group, in: items)
            defer { withExtendedLifetime(lock) {} }
            try refreshManifest()
            switch try currentGeneration(file.fileName, group: group, in: items) {
            case nil:
                if !rollback.isListed(file) { return false } // deleted meanwhile
            case let now?:
                if now != generation, let current = rollback.verdict(now, file: file), current == .current {
                    return true
                }
            }
            settled = rollback.verdict(generation, file: file) ?? .current
        }
        switch settled {
        case .current: return true
        case .deleted: return false
        case .older(let expected):
            throw KeychainError(
                .rolledBack,
                "\(path) is generation \(generation) of its item, but the store's manifest records generation \(expected): the file was put back from an older copy (alone or with its directory). Nothing was read. Delete the item and store it again, or restore the store from its newest backup"
            )
        case .restoredDeleted:
            throw KeychainError(
                .rolledBack,
                "\(path) is an item the store deleted (generation \(generation)), put back from an older copy. Nothing was read. Delete it again, or restore the store from its newest backup"
            )
        }
    }

    /// Checks that an item absent from its directory is absent in the manifest too (looked at
    /// again under the group's lock, as ``checkGeneration(_:file:group:path:in:groupLocked:)`` does).
    ///
    /// - Throws: ``KeychainError`` `.rolledBack` when the manifest lists it: its file was deleted
    ///   behind the keychain's back (or its directory put back from a copy without it).
    func checkAbsence(
        file name: String, group: String, in items: Directory, groupLocked: Bool = false
    ) throws(KeychainError) {
        guard let file = Manifest.ItemKey(fileName: name), rollback.isListed(file) else { return }
        try refreshManifest()
        guard rollback.isListed(file) else { return }
        if !groupLocked {
            let lock = try groupLock(group, in: items)
            defer { withExtendedLifetime(lock) {} }
            try refreshManifest()
            if !rollback.isListed(file) { return }
            if try currentGeneration(name, group: group, in: items) != nil { return }
        }
        let generation = rollback.recordedGeneration(file) ?? 0
        throw KeychainError(
            .rolledBack,
            "The item file \(items.path)/\(group)/\(name) (generation \(generation)) is missing although the store's manifest lists it: it was deleted outside the keychain, or its directory was put back from an older copy. Delete the item through the keychain to accept its loss, or restore the store from its newest backup"
        )
    }

    /// Checks that every item the manifest lists in `groups` was seen by a listing.
    func checkListed(
        groups: Set<String>, seen seenKeys: Set<Manifest.ItemKey>, in items: Directory, groupLocked: Bool = false
    ) throws(KeychainError) {
        for (file, group) in rollback.missing(groups: groups, seen: seenKeys) {
            try checkAbsence(file: file, group: group, in: items, groupLocked: groupLocked)
        }
    }

    private func groupLock(_ group: String, in items: Directory) throws(KeychainError) -> LockFile? {
        guard let directory = try Directory.open(group, in: items, create: false) else { return nil }
        return try directory.lock(".lock", timeout: lockTimeout)
    }

    /// The generation of the item file there now, or nil when there is none.
    private func currentGeneration(_ file: String, group: String, in items: Directory) throws(KeychainError) -> UInt64?
    {
        guard let directory = try Directory.open(group, in: items, create: false),
            let opened = try directory.openFile(file),
            opened.size >= ItemFileV2.headerSize
        else { return nil }
        return try ItemFileV2.decodeHeader(
            try opened.read(count: ItemFileV2.headerSize, at: 0)[...], fileSize: opened.size,
            storeID: storeID, path: opened.path
        ).generation
    }
}

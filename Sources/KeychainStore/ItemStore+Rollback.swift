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
    /// What a protected store knows of its manifest.
    struct RollbackState: Sendable {
        var manifest: Manifest.State
        /// The manifest file's inode: another one means a writer compacted it (or someone replaced it).
        var inode: UInt64
        var fileName: String
        /// When this handle started its epoch (nil: not yet; the first write starts one).
        var epochStarted: ContinuousClock.Instant?
    }

    /// How long a handle writes in one epoch before it moves the counter again.
    static let epochLifetime: Duration = .seconds(600)
    /// Where new counters are defined: 2,097,152 handles in the upper half of the NV range no one
    /// has registered (0x01800000 to 0x01BFFFFF, where the device's indices also are, see
    /// ``DeviceIndices``); a taken one is skipped.
    static let counterRange: Range<UInt32> = 0x01A0_0000..<0x01C0_0000
    /// Where counters were defined before (space the TCG registry reserves for others): a store
    /// keeps the counter store.meta names wherever it is, and one found without a counter is also
    /// asked about these handles.
    static let legacyCounterRange: Range<UInt32> = 0x0155_0000..<0x0156_0000

    /// Whether the store detects rollback and deletion (it has a counter in the TPM and a manifest).
    package var isRollbackProtected: Bool {
        // A pattern without a binding: `!= nil` copied the manifest state (two writes' records
        // ask twice each).
        rollback.withLock { (state) -> Bool in
            if case .none = state { return false }
            return true
        }
    }
    /// The NV index of the store's rollback counter, or nil.
    package var rollbackCounterIndex: UInt32? { rollback.withLock { $0?.manifest.counterIndex } }
    /// The latest epoch in the manifest as this handle last read it: the counter's value since
    /// the last epoch began (one more while a writer that died between the two is not yet followed).
    package var manifestEpoch: UInt64? { rollback.withLock { $0?.manifest.epoch } }

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
        guard let file = key ?? Manifest.ItemKey(fileName: file), let verdict = verdict(generation, file: file) else {
            return true
        }
        if verdict == .current { return true }
        try refreshManifest()
        var settled = self.verdict(generation, file: file) ?? .current
        if settled != .current && settled != .deleted && !groupLocked {
            let lock = try groupLock(group, in: items)
            defer { withExtendedLifetime(lock) {} }
            try refreshManifest()
            switch try currentGeneration(file.fileName, group: group, in: items) {
            case nil:
                if !isListed(file) { return false } // deleted meanwhile
            case let now?:
                if now != generation, let current = self.verdict(now, file: file), current == .current { return true }
            }
            settled = self.verdict(generation, file: file) ?? .current
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
        guard let file = Manifest.ItemKey(fileName: name), isListed(file) else { return }
        try refreshManifest()
        guard isListed(file) else { return }
        if !groupLocked {
            let lock = try groupLock(group, in: items)
            defer { withExtendedLifetime(lock) {} }
            try refreshManifest()
            if !isListed(file) { return }
            if try currentGeneration(name, group: group, in: items) != nil { return }
        }
        let generation = rollback.withLock { $0?.manifest.entries[file]?.generation } ?? 0
        throw KeychainError(
            .rolledBack,
            "The item file \(items.path)/\(group)/\(name) (generation \(generation)) is missing although the store's manifest lists it: it was deleted outside the keychain, or its directory was put back from an older copy. Delete the item through the keychain to accept its loss, or restore the store from its newest backup"
        )
    }

    /// Checks that every item the manifest lists in `groups` was seen by a listing.
    func checkListed(
        groups: Set<String>, seen seenKeys: Set<Manifest.ItemKey>, in items: Directory, groupLocked: Bool = false
    ) throws(KeychainError) {
        // Compared by manifest key: no file name is formatted for the items that are there.
        func missing() -> [(String, String)] {
            rollback.withLock { state in
                var missing: [(String, String)] = []
                for (key, entry) in state?.manifest.entries ?? [:]
                where entry.live && !seenKeys.contains(key) && groups.contains(entry.group) {
                    missing.append((key.fileName, entry.group))
                }
                return missing
            }
        }
        for (file, group) in missing() {
            try checkAbsence(file: file, group: group, in: items, groupLocked: groupLocked)
        }
    }

    private func verdict(_ generation: UInt64, file: Manifest.ItemKey) -> Verdict? {
        // Only the manifest is read: `state.map` copied the whole rollback state, on every get.
        rollback.withLock { state in
            guard let manifest = state?.manifest else { return nil }
            return Self.verdict(generation, file: file, manifest)
        }
    }

    private func isListed(_ file: Manifest.ItemKey) -> Bool {
        rollback.withLock { $0?.manifest.entries[file]?.live ?? false }
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

    enum Verdict: Equatable {
        case current
        /// The file an interrupted delete left (its generation is the one deleted).
        case deleted
        case older(expected: UInt64)
        case restoredDeleted
    }

    static func verdict(_ generation: UInt64, file: Manifest.ItemKey, _ manifest: Manifest.State) -> Verdict {
        let entry = manifest.entries[file]
        if let entry, entry.pending == generation { return .current }
        // Not listed (or only announced: generation 0 is no version): new only above every
        // generation the manifest has seen (a write whose records a power loss took).
        guard let entry, entry.live || entry.generation > 0 else {
            return generation > manifest.highWater ? .current : .restoredDeleted
        }
        if entry.live { return generation >= entry.generation ? .current : .older(expected: entry.generation) }
        if generation > entry.generation { return .current }
        return generation == entry.generation && !entry.finished ? .deleted : .restoredDeleted
    }

    /// Reads what other processes appended (or the whole file, when it was compacted or replaced).
    ///
    /// - Parameter writable: open the manifest for writing as well, for an append under its lock.
    /// - Returns: the manifest as opened, or nil when this store keeps none or another process
    ///   rotated its keys (the new manifest has another name).
    @discardableResult
    func refreshManifest(writable: Bool = false, reusing held: OpenFile? = nil) throws(KeychainError) -> OpenFile? {
        guard
            let (fileName, inode, validSize, counterIndex, epoch) = rollback.withLock({ state in
                state.map {
                    ($0.fileName, $0.inode, $0.manifest.validSize, $0.manifest.counterIndex, $0.manifest.epoch)
                }
            })
        else { return nil }
        var reopened: OpenFile?
        if let held { reopened = try rootDirectory.reopenFile(fileName, heldAs: held) }
        if reopened == nil { reopened = try rootDirectory.openFile(fileName, writable: writable) }
        guard let file = reopened else {
            // Another process rotated the master key: its manifest has the new key's name.
            if try refreshIfRotated(try current()) { return nil }
            throw KeychainError(
                .rolledBack,
                "The manifest \(root)/\(fileName) of this rollback-protected store disappeared: the store was put back from an incomplete copy, or the file was deleted"
            )
        }
        let keys = try current().keys
        // The name the descriptor was opened by, formatted when it was opened.
        let path = file.path
        if file.inode != inode || file.size < validSize {
            let reloaded = try Manifest.parse(
                try Self.readManifest(file, path: path), key: keys.manifest, storeID: storeID,
                counterIndex: counterIndex, path: path)
            guard reloaded.epoch >= epoch else {
                throw KeychainError(
                    .rolledBack,
                    "The manifest \(path) was replaced by an older copy (epoch \(reloaded.epoch), this process has seen \(epoch))"
                )
            }
            let newInode = file.inode
            rollback.withLock { state in
                guard state != nil else { return }
                state!.manifest = reloaded
                state!.inode = newInode
            }
        } else if file.size > validSize {
            guard file.size <= Manifest.maximumSize else { throw Self.oversizedManifest(path, size: file.size) }
            let tail = try file.read(count: file.size - validSize, at: validSize)
            let error = rollback.withLock { state -> KeychainError? in
                guard state != nil else { return nil }
                return Manifest.apply(
                    tail[...], at: validSize, to: &state!.manifest, macs: keys.manifestMAC, path: path)
            }
            if let error { throw error }
        }
        return file
    }

    /// Writes `records` at the end of what this handle has read (the caller holds the manifest's
    /// lock and has just refreshed) and applies them: through `manifest`, the descriptor that
    /// refresh opened under the lock, or by name when there is none.
    private func appendLocked(
        _ records: [Manifest.Record], durable: Bool, keys: StoreKeys, through manifest: OpenFile? = nil
    ) throws(KeychainError) {
        guard
            let (fileName, validSize, lastMAC, inode) = rollback.withLock({ state in
                state.map { ($0.fileName, $0.manifest.validSize, $0.manifest.lastMAC, $0.inode) }
            })
        else { return }
        let bytes = Manifest.encode(records, after: lastMAC, macs: keys.manifestMAC)
        if let manifest, manifest.inode == inode {
            try manifest.write(bytes, at: validSize, durable: durable)
        } else {
            try rootDirectory.overwrite(fileName, at: validSize, with: bytes, durable: durable)
        }
        let error = rollback.withLock { state -> KeychainError? in
            guard state != nil else { return nil }
            return Manifest.apply(
                bytes[...], at: validSize, to: &state!.manifest, macs: keys.manifestMAC, path: root + "/" + fileName,
                encodedAfter: lastMAC)
        }
        if let error { throw error }
    }

    // MARK: Writing

    /// The generation a write gives an item whose file now holds `existing` (nil: none): above
    /// what the file and the manifest have, and for a new item above every generation recorded.
    func nextGeneration(file: String, existing: UInt64?) -> UInt64 {
        let key = Manifest.ItemKey(fileName: file)
        let recorded = rollback.withLock { state -> UInt64? in
            guard let manifest = state?.manifest else { return nil }
            return key.flatMap { manifest.entries[$0]?.generation } ?? manifest.highWater
        }
        return max(existing ?? 0, recorded ?? 0) + 1
    }

    /// Whether the manifest records `generation` as the item's current version (not only as
    /// accepted: newer than recorded, or announced by a writer that died).
    func isRecorded(_ file: String, generation: UInt64) -> Bool {
        guard let key = Manifest.ItemKey(fileName: file) else { return true }
        return rollback.withLock { state in
            guard let entry = state?.manifest.entries[key] else { return state == nil }
            return entry.live && entry.generation == generation
        }
    }

    /// Whether a write of `file` must append its "W" record before the rename. Not when the
    /// manifest lists the item as live: its entry alone makes any higher generation current (a
    /// writer killed after its rename leaves a file newer than recorded, which is accepted), and
    /// a compaction keeps a live entry. A new item, or a deleted one written again, needs it:
    /// other items' records may raise the high-water mark past the file's generation before its
    /// "S", and a compaction drops a finished delete, after which only the "W" vouches for the file.
    func writeNeedsAnnouncement(_ file: String) -> Bool {
        guard let key = Manifest.ItemKey(fileName: file) else { return true }
        return rollback.withLock { state in !(state?.manifest.entries[key]?.live ?? false) }
    }

    /// Records writes about to happen (`.writing`, before the rename), writes done (`.set`),
    /// deletes about to happen (`.deleting`, durable before the files go) and deletes done (`.deleted`).
    func recordInManifest(
        _ kind: Manifest.Kind, _ items: [(path: Manifest.ItemPath, generation: UInt64)]
    ) throws(KeychainError) {
        guard isRollbackProtected, !items.isEmpty else { return }
        var records: [Manifest.Record] = []
        for item in items {
            guard let record = Manifest.Record.item(kind, item.path, generation: item.generation) else {
                throw KeychainError(.invalidParameter, "\(item.path.group)/\(item.path.file) is not an item file name")
            }
            records.append(record)
        }
        try append(records, durable: kind == .deleting && durable)
    }

    /// Appends records under the manifest's lock, after reading what others appended; compacts
    /// the manifest when it has grown well past what its live items need.
    private func append(_ records: [Manifest.Record], durable: Bool) throws(KeychainError) {
        guard let fileName = rollback.withLock({ $0?.fileName }) else { return }
        try withManifestLock(fileName) { (held) throws(KeychainError) in
            try appendHoldingLock(records, durable: durable, fileName: fileName, held: &held)
        }
    }

    /// Runs `body` holding the lock of the manifest `fileName`: this process's other threads
    /// wait on the mutex, other processes on the flock. `body` gets the manifest the last append
    /// opened (writable), to use again if the name still names it, and leaves the one it used.
    private func withManifestLock<R>(
        _ fileName: String, _ body: (inout OpenFile?) throws(KeychainError) -> R
    ) throws(KeychainError) -> R {
        let lockName = fileName + ".lock"
        return try manifestLock.withLock { (held) throws(KeychainError) -> R in
            if held?.name != lockName { held = (lockName, try rootDirectory.openLock(lockName), nil) }
            let file = held!.file
            try rootDirectory.relock(file, named: lockName, timeout: lockTimeout)
            defer { file.unlock() }
            return try body(&held!.manifest)
        }
    }

    private func appendHoldingLock(
        _ records: [Manifest.Record], durable: Bool, fileName: String, held: inout OpenFile?
    ) throws(KeychainError) {
        // One descriptor for the refresh and the append, opened under the lock, or the one the
        // last append opened while the name still names its inode.
        let manifest = try refreshManifest(writable: true, reusing: held)
        held = manifest
        let keys = try current().keys
        try appendLocked(records, durable: durable, keys: keys, through: manifest)
        let compact = rollback.withLock { state -> [UInt8]? in
            guard let manifest = state?.manifest, manifest.validSize > Manifest.compactionThreshold,
                manifest.validSize > 4 * (manifest.liveCount + 2) * Manifest.recordSize
            else { return nil }
            return Manifest.compacted(manifest, key: keys.manifest)
        }
        if let compact {
            // Under the manifest's lock: every appender re-reads the file (a new inode) before writing.
            try rootDirectory.replace(fileName, with: compact, durable: true)
            held = nil
            try refreshManifest()
        }
    }

    /// Starts an epoch when this handle has none or an old one: under the manifest's lock, the
    /// epoch record is made durable, then the TPM counter moves to it. A manifest put back from an
    /// older copy since this handle opened is caught here too.
    func startEpochIfNeeded() throws(KeychainError) {
        guard
            let (fileName, started, index) = rollback.withLock({ state in
                state.map { ($0.fileName, $0.epochStarted, $0.manifest.counterIndex) }
            })
        else { return }
        if let started, ContinuousClock.now - started < Self.epochLifetime { return }
        let lock = try rootDirectory.lock(fileName + ".lock", timeout: lockTimeout)
        defer { withExtendedLifetime(lock) {} }
        try refreshManifest()
        let keys = try current().keys
        try withLentTPM { (configuration) throws(KeychainError) in
            try Self.withTPM(configuration, root: root, cache: StorageKeyContextFile(directory: rootDirectory)) { tpm in
                let counter = try Self.readCounter(index, keys: keys, tpm: tpm, store: root)
                guard let epoch = rollback.withLock({ $0?.manifest.epoch }) else { return }
                if epoch < counter {
                    throw KeychainError(
                        .rolledBack,
                        "The manifest of the keychain at \(root) is older than its TPM counter (epoch \(epoch), counter \(counter)): it was put back from an older copy while the store was open"
                    )
                }
                if epoch == counter {
                    try appendLocked([Manifest.Record(kind: .epoch, value: counter + 1)], durable: true, keys: keys)
                }
                do {
                    try tpm.incrementNVCounter(index, authValue: Self.counterAuthorization(keys))
                } catch let error as TPMError where error.code == .handleNotFound {
                    throw Self.counterMissing(index, store: root, underlying: error)
                }
                rollback.withLock { $0?.epochStarted = ContinuousClock.now }
            }
        }
    }
}

import Crypto
import FoundationEssentials
import KeychainVocabulary
import SystemCalls

#if canImport(Glibc)
import Glibc
#endif

/// What one open store knows of its manifest, and the manifest's lock: the state the rollback
/// checks read on every get and the writes append to (the checks themselves, which need the
/// store's group locks and its TPM, are in ItemStore+Rollback.swift).
///
/// It owns both of its locks. `state` is short: a lookup or an update of the parsed manifest.
/// `manifestLock` is held across an append (read what others appended, write, maybe compact) and
/// keeps this process's threads apart where one flock description cannot.
final class RollbackGuard: Sendable {
    /// What a protected store knows of its manifest.
    struct State: Sendable {
        var manifest: Manifest.State
        /// The manifest file's inode: another one means a writer compacted it (or someone replaced it).
        var inode: UInt64
        var fileName: String
        /// When this handle started its epoch (nil: not yet; the first write starts one).
        var epochStarted: ContinuousClock.Instant?
    }

    enum Verdict: Equatable {
        case current
        /// The file an interrupted delete left (its generation is the one deleted).
        case deleted
        case older(expected: UInt64)
        case restoredDeleted
    }

    /// The manifest's lock file, kept open between appends (two system calls fewer per record),
    /// and the manifest itself as the last append opened it (an fstatat instead of an open and a
    /// close per record while no other process replaced it).
    private struct HeldLock {
        let name: String
        let file: LockFile
        var manifest: OpenFile?
    }

    /// How long a handle writes in one epoch before it moves the counter again.
    static let epochLifetime: Duration = .seconds(600)

    private let state: Locked<State?>
    private let manifestLock = Locked<HeldLock?>(nil)
    let root: Directory
    let lockTimeout: Duration

    /// - Parameter state: nil for a store without a counter (nothing is checked or recorded).
    init(_ state: State?, root: Directory, lockTimeout: Duration) {
        self.state = Locked(state)
        self.root = root
        self.lockTimeout = lockTimeout
    }

    /// Starts again from `state`: the manifest of a new master key, or none once closed.
    func replace(with state: State?) {
        self.state.withLock { $0 = state }
        if state == nil { manifestLock.withLock { $0 = nil } }
    }

    var isProtected: Bool {
        // A pattern without a binding: `!= nil` copied the manifest state (two writes' records
        // ask twice each).
        state.withLock { (state) -> Bool in
            if case .none = state { return false }
            return true
        }
    }

    var counterIndex: UInt32? { state.withLock { $0?.manifest.counterIndex } }
    var epoch: UInt64? { state.withLock { $0?.manifest.epoch } }
    var fileName: String? { state.withLock { $0?.fileName } }

    /// What a refresh compares the file with: its name, inode and the bytes already applied.
    var position: (fileName: String, inode: UInt64, validSize: Int, counterIndex: UInt32, epoch: UInt64)? {
        state.withLock { state in
            state.map { ($0.fileName, $0.inode, $0.manifest.validSize, $0.manifest.counterIndex, $0.manifest.epoch) }
        }
    }

    /// What an epoch's start needs: the manifest's name, when this handle's epoch began, the counter.
    var epochStart: (fileName: String, started: ContinuousClock.Instant?, counterIndex: UInt32)? {
        state.withLock { state in state.map { ($0.fileName, $0.epochStarted, $0.manifest.counterIndex) } }
    }

    func markEpochStarted() { state.withLock { $0?.epochStarted = ContinuousClock.now } }

    // MARK: Reading

    /// How the manifest judges `generation` of `file`, or nil for a store without one.
    func verdict(_ generation: UInt64, file: Manifest.ItemKey) -> Verdict? {
        // Only the manifest is read: `state.map` copied the whole state, on every get.
        state.withLock { state in
            guard let manifest = state?.manifest else { return nil }
            return Self.verdict(generation, file: file, manifest)
        }
    }

    func isListed(_ file: Manifest.ItemKey) -> Bool {
        state.withLock { $0?.manifest.entries[file]?.live ?? false }
    }

    /// The generation the manifest records for `file`, or nil when it records none.
    func recordedGeneration(_ file: Manifest.ItemKey) -> UInt64? {
        state.withLock { $0?.manifest.entries[file]?.generation }
    }

    /// The live items of `groups` that are not among `seen`, as (file name, group).
    func missing(groups: Set<String>, seen: Set<Manifest.ItemKey>) -> [(file: String, group: String)] {
        // Compared by manifest key: no file name is formatted for the items that are there.
        state.withLock { state in
            var missing: [(file: String, group: String)] = []
            for (key, entry) in state?.manifest.entries ?? [:]
            where entry.live && !seen.contains(key) && groups.contains(entry.group) {
                missing.append((key.fileName, entry.group))
            }
            return missing
        }
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

    // MARK: Writing

    /// The generation a write gives an item whose file now holds `existing` (nil: none): above
    /// what the file and the manifest have, and for a new item above every generation recorded.
    func nextGeneration(file: String, existing: UInt64?) -> UInt64 {
        let key = Manifest.ItemKey(fileName: file)
        let recorded = state.withLock { state -> UInt64? in
            guard let manifest = state?.manifest else { return nil }
            return key.flatMap { manifest.entries[$0]?.generation } ?? manifest.highWater
        }
        return max(existing ?? 0, recorded ?? 0) + 1
    }

    /// Whether the manifest records `generation` as the item's current version (not only as
    /// accepted: newer than recorded, or announced by a writer that died).
    func isRecorded(_ file: String, generation: UInt64) -> Bool {
        guard let key = Manifest.ItemKey(fileName: file) else { return true }
        return state.withLock { state in
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
        return state.withLock { state in !(state?.manifest.entries[key]?.live ?? false) }
    }

    /// Runs `body` holding the lock of the manifest `fileName`: this process's other threads
    /// wait on the mutex, other processes on the flock. `body` gets the manifest the last append
    /// opened (writable), to use again if the name still names it, and leaves the one it used.
    func withManifestLock<R>(
        _ fileName: String, _ body: (inout OpenFile?) throws(KeychainError) -> R
    ) throws(KeychainError) -> R {
        let lockName = fileName + ".lock"
        return try manifestLock.withLock { (held) throws(KeychainError) -> R in
            if held?.name != lockName { held = HeldLock(name: lockName, file: try root.openLock(lockName)) }
            let file = held!.file
            try root.relock(file, named: lockName, timeout: lockTimeout)
            defer { file.unlock() }
            return try body(&held!.manifest)
        }
    }

    /// Takes what a re-read of the manifest found: the whole file parsed again (another inode).
    func adopt(_ manifest: Manifest.State, inode: UInt64) {
        state.withLock { state in
            guard state != nil else { return }
            state!.manifest = manifest
            state!.inode = inode
        }
    }

    /// Applies bytes appended at `offset` (by another process, or just written by this one).
    ///
    /// - Returns: the error the bytes' authentication found, or nil.
    func apply(
        _ bytes: ArraySlice<UInt8>, at offset: Int, macs: Manifest.RecordMAC, path: String, encodedAfter: [UInt8]? = nil
    ) -> KeychainError? {
        state.withLock { state -> KeychainError? in
            guard state != nil else { return nil }
            return Manifest.apply(
                bytes, at: offset, to: &state!.manifest, macs: macs, path: path, encodedAfter: encodedAfter)
        }
    }

    /// Where an append writes: the manifest's name, the bytes applied, the last record's MAC, the inode.
    var appendPosition: (fileName: String, validSize: Int, lastMAC: [UInt8], inode: UInt64)? {
        state.withLock { state in state.map { ($0.fileName, $0.manifest.validSize, $0.manifest.lastMAC, $0.inode) } }
    }

    /// The manifest rewritten with its live entries only, when it has grown well past what they need.
    func compactionIfDue(key: SymmetricKey) -> [UInt8]? {
        state.withLock { state -> [UInt8]? in
            guard let manifest = state?.manifest, manifest.validSize > Manifest.compactionThreshold,
                manifest.validSize > 4 * (manifest.liveCount + 2) * Manifest.recordSize
            else { return nil }
            return Manifest.compacted(manifest, key: key)
        }
    }
}

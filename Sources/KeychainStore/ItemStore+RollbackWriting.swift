import Crypto
import FoundationEssentials
import KeychainVocabulary
import SystemCalls
import TPM
#if canImport(Glibc)
import Glibc
#endif

// The rollback guard's writing side: each write's generation, its record in the manifest,
// appended under the manifest's lock, and the epochs the TPM counter moves through.
extension ItemStore {
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

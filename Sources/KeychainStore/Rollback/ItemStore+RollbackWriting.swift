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
        guard let fileName = rollback.fileName else { return }
        try rollback.withManifestLock(fileName) { (held) throws(KeychainError) in
            try appendHoldingLock(records, durable: durable, fileName: fileName, held: &held)
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
        if let compact = rollback.compactionIfDue(key: keys.manifest) {
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
            let (fileName, started, index) = rollback.epochStart
        else { return }
        if let started, ContinuousClock.now - started < RollbackGuard.epochLifetime { return }
        let lock = try rootDirectory.lock(fileName + ".lock", timeout: lockTimeout)
        defer { withExtendedLifetime(lock) {} }
        try refreshManifest()
        let keys = try current().keys
        try withLentTPM { (configuration) throws(KeychainError) in
            try Self.withTPM(configuration, root: root, cache: StorageKeyContextFile(directory: rootDirectory)) { tpm in
                let counter = try Self.readCounter(index, keys: keys, tpm: tpm, store: root)
                guard let epoch = rollback.epoch else { return }
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
                rollback.markEpochStarted()
            }
        }
    }
}

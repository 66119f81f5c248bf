import KeychainStore
public import KeychainVocabulary
public import TPM

/// A store's recovery key: 256 random bits, written as 8 groups of 8 letters (systemd-cryptenroll's
/// alphabet), shown once when it is added and kept by the person, never on the machine. With it,
/// the store's items survive the loss of the TPM that sealed them (``KeychainLocation/recover(with:)``).
///
/// Its ``description`` never shows the key, so logging one by accident leaks nothing; ``text`` does.
public struct RecoveryKey: Sendable, CustomStringConvertible {
    let secret: SecretBytes

    /// The key as a person writes it down: `xxxxxxxx-xxxxxxxx-...`, 8 groups.
    public var text: String { ItemStore.recoveryKeyText(secret) }

    /// A key a person typed; case, dashes and spaces do not matter.
    ///
    /// - Throws: ``KeychainError`` `.invalidParameter` unless it is 64 letters of the alphabet.
    public init(text: String) throws(KeychainError) {
        secret = try ItemStore.recoveryKey(fromText: text)
    }

    /// A key as read from a terminal or a descriptor, kept out of Swift strings (which cannot be
    /// erased); case, dashes, spaces and line ends do not matter.
    ///
    /// - Throws: ``KeychainError`` `.invalidParameter` unless it is 64 letters of the alphabet.
    public init(typed: SecretBytes) throws(KeychainError) {
        secret = try ItemStore.recoveryKey(fromTyped: typed)
    }

    init(secret: SecretBytes) { self.secret = secret }

    /// `RecoveryKey(hidden)`: never the key itself.
    public var description: String { "RecoveryKey(hidden)" }
}

/// What ``KeychainLocation/recover(with:)`` did.
public struct RecoveryReport: Sendable, Equatable {
    /// Items readable again under this TPM.
    public let itemsKept: Int
    /// Items removed because they were bound to the old TPM: this-device-only items, and items
    /// behind access control (biometry, passcode), whose keys were sealed to the old TPM.
    public let itemsRemoved: Int
}

// The recovery path after a TPM change (docs/SECURITY.md, "TPM change and recovery").
extension KeychainLocation {
    /// Adds a recovery key to the store (replacing one it had): show ``RecoveryKey/text`` to the
    /// person once; it is not stored anywhere on this machine, and whoever has it and a copy of
    /// the store's files can read the items without this TPM.
    ///
    /// - Throws: ``KeychainError`` `.storeNotFound`, and what opening a store throws.
    public func addRecoveryKey() throws(KeychainError) -> RecoveryKey {
        try checkStore()
        let store = try OpenStores.store(at: self)
        return RecoveryKey(secret: try store.addRecoveryKey())
    }

    /// The kind of TPM the store's metadata says it was created on ("a TPM device", "a simulated
    /// TPM", ...), read without the TPM; nil when there is no store, or it is older than that record.
    public var recordedTPM: String? {
        ItemStore.recordedTPMKind(at: path)?.description
    }

    /// Whether the store was created on a simulated TPM, by its metadata (nil: not recorded).
    public var recordedTPMIsSimulated: Bool? {
        ItemStore.recordedTPMKind(at: path)?.isSimulated
    }

    /// The NV index of the store's rollback counter as its metadata records it, read without the
    /// TPM (not yet authenticated; opening checks it). Nil when the store has none or no store
    /// can be read here.
    public var recordedRollbackCounterIndex: UInt32? {
        ItemStore.recordedMetadata(at: path)?.rollbackCounter
    }

    /// The store's item layout (1 to 3) as its metadata records it; nil when none can be read.
    public var recordedLayout: Int? {
        ItemStore.recordedMetadata(at: path).map { Int($0.layout) }
    }

    /// The user ID the store says it is bound to (docs/SECURITY.md, "User binding"), as its
    /// metadata records it, before anything authenticates it; nil for a store not bound.
    public var recordedBoundUser: UInt32? {
        ItemStore.recordedMetadata(at: path)?.boundUser
    }

    /// Whether the store has a recovery key (found without the TPM).
    public var hasRecoveryKey: Bool {
        (try? ItemStore.hasRecoveryKey(at: path)) ?? false
    }

    /// Seals the store to this location's TPM with its recovery key, after the TPM that sealed it
    /// was cleared or replaced (opening then fails with `.wrongTPM`). The store's items are kept,
    /// apart from those bound to the old TPM by design: this-device-only items, and items behind
    /// access control. The recovery key stays valid.
    ///
    /// - Throws: ``KeychainError`` `.authenticationFailed` (another recovery key), `.notAvailable`
    ///   (the store has none), `.storeNotFound`, `.tampered`, `.tpmUnavailable`.
    @discardableResult
    public func recover(with key: RecoveryKey) throws(KeychainError) -> RecoveryReport {
        OpenStores.close(self)
        let tpm = try StoreTPM.choose(for: self)
        defer { tpm.stop() }
        let recovery = try ItemStore.recover(
            at: path, recoveryKey: key.secret, tpm: tpm.configuration, tpmKind: tpm.kind)
        return RecoveryReport(itemsKept: recovery.kept, itemsRemoved: recovery.removed)
    }

    /// For a rollback-protected store whose TPM counter is gone (``KeychainError/Code/rollbackCounterMissing``:
    /// anyone with the TPM owner's authorization can undefine it) and which has no recovery key:
    /// accepts the store's files as they are now, with a new counter, so that it opens again. Only
    /// whoever this TPM unseals the store's master key for can do it.
    ///
    /// - Important: the files are accepted as they are: an older copy of an item put back before
    ///   this call is taken as current. Restore the newest backup first when in doubt.
    /// - Returns: how many items the store holds.
    /// - Throws: ``KeychainError`` `.invalidParameter` (the counter is there, or the store has none),
    ///   `.wrongTPM`, `.tampered`, `.notAvailable` (no room for a counter), `.storeNotFound`, `.tpmUnavailable`.
    @discardableResult
    public func acceptFilesAsTheyAre() throws(KeychainError) -> Int {
        OpenStores.close(self)
        let tpm = try StoreTPM.choose(for: self)
        defer { tpm.stop() }
        return try ItemStore.acceptFilesAsTheyAre(at: path, tpm: tpm.configuration, tpmKind: tpm.kind)
    }
}

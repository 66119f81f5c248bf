/// Somewhere a program keeps the storage key's saved TPM context between processes.
///
/// Deriving the storage key (TPM2_CreatePrimary) is the most expensive step of opening a TPM
/// connection. After it, the connection saves the key's context (TPM2_ContextSave) here; a later
/// process loads it (TPM2_ContextLoad, one cheap command) instead. The TPM protects the blob's
/// integrity and binds it to this TPM, its owner hierarchy and the time since its last reset: any
/// other blob is refused by the TPM, and the loaded key's name must still equal the name pinned
/// in the sealed object. Whenever the context cannot be used the key is derived again and the
/// cache rewritten, so a stale or damaged cache costs time, never correctness.
public protocol StorageKeyContextCache: Sendable {
    /// The saved context, or nil.
    func loadStorageKeyContext() -> [UInt8]?
    /// Keeps `context` for later processes; failures may be ignored (the cache is an optimisation).
    func saveStorageKeyContext(_ context: [UInt8])
}

import TPM

/// `<store>/storage-key.context`: the storage key's saved TPM context, so that opening the store
/// loads the key (TPM2_ContextLoad) instead of deriving it (TPM2_CreatePrimary). Only used while
/// the store's lock is held (when the store is opened). See ``StorageKeyContextCache`` for why a
/// stale or foreign file is harmless.
struct StorageKeyContextFile: StorageKeyContextCache {
    static let name = "storage-key.context"
    static let maximumSize = 8192
    let directory: Directory

    func loadStorageKeyContext() -> [UInt8]? {
        guard let file = try? directory.openFile(Self.name), file.size <= Self.maximumSize else { return nil }
        return try? file.read(count: file.size, at: 0)
    }

    func saveStorageKeyContext(_ context: [UInt8]) {
        _ = try? directory.replace(Self.name, with: context, durable: false)
    }
}

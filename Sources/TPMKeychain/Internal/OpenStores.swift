import KeychainStore
import Synchronization
import TPM

/// The stores this process has opened, one per path, so the master key is unsealed once per
/// store and shared by every `Keychain` value and thread.
enum OpenStores {
    private static let stores = Mutex<[KeychainLocation: ItemStore]>([:])

    /// The opened store at `location`, opening it (one TPM unseal) on first use.
    static func store(at location: KeychainLocation) throws(KeychainError) -> ItemStore {
        try stores.withLock { (stores) throws(KeychainError) -> ItemStore in
            if let store = stores[location] { return store }
            let configuration = location.tcti.map { TPMConfiguration(tcti: $0) } ?? .fromEnvironment()
            let store = try ItemStore.open(at: location.path, tpm: configuration)
            stores[location] = store
            return store
        }
    }

    /// Erases the store's keys from memory; the next use unseals the master key again.
    static func close(_ location: KeychainLocation) {
        stores.withLock { stores in
            stores.removeValue(forKey: location)?.close()
        }
    }
}

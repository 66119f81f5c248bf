import KeychainStore
import KeychainVocabulary
import SystemCalls
import TPM

/// The stores this process has opened, one per location, so the master key is unsealed once per
/// store and shared by every `Keychain` value and thread.
///
/// The process-wide lock only finds or adds a location's entry; opening (a TPM unseal that may
/// wait up to the TPM timeout) happens under that entry's own lock, so a store whose TPM hangs
/// never delays operations on other stores, nor a close of its own: closing never waits for an
/// open in progress (the session holder erases its keys at a lock or suspend while a read may be
/// waiting for a TPM).
package enum OpenStores {
    private final class Entry: Sendable {
        let store = Locked<ItemStore?>(nil)
        /// Closed while it was opening: what the open makes is closed at once, not kept.
        let abandoned = Locked(false)
    }

    private static let entries = Locked<[KeychainLocation: Entry]>([:])
    /// The stores already open: the get path's one lock and one lookup.
    private static let opened = Locked<[KeychainLocation: ItemStore]>([:])

    /// The store at `location` when this process has it open already (its reads need no TPM
    /// here); nil otherwise, without opening it.
    static func openStore(at location: KeychainLocation) -> ItemStore? {
        opened.withLock { $0[location] }
    }

    /// Whether this process has the store at `location` open.
    static func isOpen(_ location: KeychainLocation) -> Bool {
        openStore(at: location) != nil
    }

    /// The opened store at `location`, opening it (one TPM unseal) on first use.
    static func store(at location: KeychainLocation) throws(KeychainError) -> ItemStore {
        if let store = openStore(at: location) { return store }
        let entry = entries.withLock { entries in
            if let entry = entries[location] { return entry }
            let entry = Entry()
            entries[location] = entry
            return entry
        }
        return try entry.store.withLock { (store) throws(KeychainError) -> ItemStore in
            if let store { return store }
            // Closed while this waited for an open that was abandoned: no unseal for nothing.
            guard !entry.abandoned.withLock({ $0 }) else { throw Self.closedWhileOpening(location) }
            let tpm = try StoreTPM.choose(for: location)
            // A simulated TPM is needed only for the unseal: stopped as soon as the store is open.
            defer { tpm.stop() }
            let newStore = try ItemStore.open(
                at: location.path, tpm: tpm.configuration, lendTPM: lender(for: location),
                tpmKind: location.storeExists ? tpm.kind : tpm.kindForNewStore)
            // Published under the entry's abandoned flag, which ``close(_:)`` sets before it
            // empties `opened`: a store made after a close is never found there again.
            let kept = entry.abandoned.withLock { abandoned in
                if !abandoned { opened.withLock { $0[location] = newStore } }
                return !abandoned
            }
            guard kept else {
                newStore.close()
                throw Self.closedWhileOpening(location)
            }
            store = newStore
            return newStore
        }
    }

    private static func closedWhileOpening(_ location: KeychainLocation) -> KeychainError {
        KeychainError(.storeClosed, "The keychain store at \(location.path) was closed while it opened")
    }

    /// The TPM for a store's later work (a key rotation, or following one): chosen again each
    /// time, so that a simulated TPM runs only while it is used.
    private static func lender(for location: KeychainLocation) -> ItemStore.TPMLender {
        { () throws(KeychainError) -> ItemStore.TPMLease in
            do throws(KeychainError) {
                let tpm = try StoreTPM.choose(for: location)
                return ItemStore.TPMLease(configuration: tpm.configuration, release: { tpm.stop() })
            } catch {
                throw KeychainError(.tpmUnavailable, error.message, underlying: error)
            }
        }
    }

    /// Erases the store's keys from memory; the next use unseals the master key again. An open in
    /// progress is not waited for: the store it makes is closed as soon as it is made, and that
    /// open fails with `.storeClosed`.
    package static func close(_ location: KeychainLocation) {
        // One step under the entries' lock: no new entry can open and publish a store between
        // the removal and the emptying of `opened`, so the store removed there is this entry's.
        let store = entries.withLock { entries -> ItemStore? in
            entries.removeValue(forKey: location)?.abandoned.withLock { $0 = true }
            return opened.withLock { $0.removeValue(forKey: location) }
        }
        store?.close()
    }
}

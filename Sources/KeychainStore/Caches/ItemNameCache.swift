import KeychainVocabulary
import SystemCalls

/// An item's names in the store, computed once: its group directory and file by identity (the
/// Keychain API's two HMACs) and by encoded primary key (class-generic lookups, SecItem). The one
/// name cache of the store; emptied with every master key and by a format upgrade.
final class ItemNameCache: Sendable {
    private struct Entries {
        var byIdentity: [ItemIdentity: ItemStore.ItemNames] = [:]
        var byPrimaryKey: [[UInt8]: (group: String, file: String)] = [:]
    }

    private let entries = Locked(Entries())

    /// The names of `identity`, if computed since the last ``removeAll()``.
    func names(of identity: ItemIdentity) -> ItemStore.ItemNames? {
        entries.withLock { $0.byIdentity[identity] }
    }

    func remember(_ names: ItemStore.ItemNames, of identity: ItemIdentity) {
        entries.withLock { entries in
            if entries.byIdentity.count >= ItemStore.cacheLimit { entries.byIdentity.removeAll(keepingCapacity: true) }
            entries.byIdentity[identity] = names
        }
    }

    /// The group and file names of an encoded primary key, if computed since the last ``removeAll()``.
    func names(ofPrimaryKey encoded: [UInt8]) -> (group: String, file: String)? {
        entries.withLock { $0.byPrimaryKey[encoded] }
    }

    func remember(_ names: (group: String, file: String), ofPrimaryKey encoded: [UInt8]) {
        entries.withLock { entries in
            if entries.byPrimaryKey.count >= ItemStore.cacheLimit {
                entries.byPrimaryKey.removeAll(keepingCapacity: true)
            }
            entries.byPrimaryKey[encoded] = names
        }
    }

    func removeAll() {
        entries.withLock { $0 = Entries() }
    }
}

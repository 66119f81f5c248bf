import Crypto
import SystemCalls

/// What decrypting a write gave, so that the same bytes are not decrypted twice: item keys by
/// the write's random salt (an HKDF each), what a listing derived from each write it read, and
/// what this process's own last writes sealed. A hit is only ever used for a file holding
/// exactly the bytes it came from; GCM still authenticates every byte read.
final class DecryptionCache: Sendable {
    private struct Entries {
        var itemKeys: [WriteSalt: SymmetricKey] = [:]
        /// Kept apart from ``itemKeys`` so that listings do not churn the get path's cache, and
        /// large enough for a listing of ``ItemStore/listingLimit`` items.
        var listed: [WriteSalt: ListedWrite] = [:]
        /// One entry per item file, the latest write's, for the last ``ItemStore/writtenLimit`` items.
        var written: [String: ListedWrite] = [:]
    }

    private let entries = Locked(Entries())

    /// The item key of the write with `salt`: cached, or derived and remembered.
    func itemKey(_ salt: WriteSalt, derive: () -> SymmetricKey) -> SymmetricKey {
        if let cached = entries.withLock({ $0.itemKeys[salt] }) { return cached }
        let key = derive()
        entries.withLock { entries in
            if entries.itemKeys.count >= ItemStore.cacheLimit { entries.itemKeys.removeAll(keepingCapacity: true) }
            entries.itemKeys[salt] = key
        }
        return key
    }

    func listed(_ salt: WriteSalt) -> ListedWrite? {
        entries.withLock { $0.listed[salt] }
    }

    func rememberListed(_ write: ListedWrite, salt: WriteSalt) {
        entries.withLock { entries in
            if entries.listed.count >= ItemStore.listingLimit { entries.listed.removeAll(keepingCapacity: true) }
            entries.listed[salt] = write
        }
    }

    func written(_ file: String) -> ListedWrite? {
        entries.withLock { $0.written[file] }
    }

    func rememberWritten(_ write: ListedWrite, file: String) {
        entries.withLock { entries in
            if entries.written.count >= ItemStore.writtenLimit, entries.written[file] == nil {
                entries.written.removeAll(keepingCapacity: true)
            }
            entries.written[file] = write
        }
    }

    func removeAll() {
        entries.withLock { $0 = Entries() }
    }
}

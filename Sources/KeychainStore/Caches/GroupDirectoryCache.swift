import SystemCalls

/// The store's open group directories, which of them were found consistent (every item file
/// read and where it belongs, as of the directory's stamp then), and the item files held open
/// for the next get (``HeldItemFile``). One owner, because a held file is only as good as its
/// directory: both are looked up, and let go, together.
final class GroupDirectoryCache: Sendable {
    private struct Entries {
        var directories: [String: Directory] = [:]
        var consistent: [String: Directory.Stamp] = [:]
        var heldFiles: [HeldItemFile.Key: HeldItemFile] = [:]

        mutating func releaseHeldFiles(inGroup group: String) {
            if heldFiles.isEmpty { return }
            heldFiles = heldFiles.filter { $0.key.group != group }
        }
    }

    private let entries = Locked(Entries())

    /// The group directory `name`, as opened (and verified) before.
    func directory(_ name: String) -> Directory? {
        entries.withLock { $0.directories[name] }
    }

    /// The group directory and the file held in it for `key`, in one look.
    func directoryAndHeldFile(_ key: HeldItemFile.Key) -> (Directory?, HeldItemFile?) {
        entries.withLock { ($0.directories[key.group], $0.heldFiles[key]) }
    }

    /// The file held for `key`, if one is.
    func heldFile(_ key: HeldItemFile.Key) -> HeldItemFile? {
        entries.withLock { $0.heldFiles[key] }
    }

    func remember(_ directory: Directory, named name: String) {
        entries.withLock { entries in
            if entries.directories.count >= ItemStore.cacheLimit {
                entries.directories.removeAll(keepingCapacity: true)
            }
            entries.directories[name] = directory
        }
    }

    func forget(_ name: String) {
        entries.withLock { _ = $0.directories.removeValue(forKey: name) }
    }

    /// Holds `file` (or, for nil, lets go of what was held) for the next get of `key`.
    func hold(_ file: HeldItemFile?, for key: HeldItemFile.Key) {
        entries.withLock { entries in
            if file != nil, entries.heldFiles[key] == nil, entries.heldFiles.count >= HeldItemFile.limit {
                entries.heldFiles.remove(at: entries.heldFiles.startIndex)
            }
            entries.heldFiles[key] = file
        }
    }

    /// Lets go of the held files of one group directory, whose items this process is removing.
    func releaseHeldFiles(inGroup group: String) {
        entries.withLock { $0.releaseHeldFiles(inGroup: group) }
    }

    /// The stamp at which `group` was last found consistent, if it was.
    func consistentStamp(_ group: String) -> Directory.Stamp? {
        entries.withLock { $0.consistent[group] }
    }

    /// Lets go of the held file of `key` and tells the stamp at which its group was found
    /// consistent: what a write of that item does first.
    func releaseForWriting(_ key: HeldItemFile.Key) -> Directory.Stamp? {
        entries.withLock { entries in
            entries.heldFiles[key] = nil
            return entries.consistent[key.group]
        }
    }

    /// Records `group` as consistent at `stamp`, or (nil) as not known to be.
    func setConsistent(_ group: String, at stamp: Directory.Stamp?) {
        entries.withLock { entries in
            guard let stamp else {
                entries.consistent.removeValue(forKey: group)
                return
            }
            if entries.consistent.count >= ItemStore.cacheLimit, entries.consistent[group] == nil {
                entries.consistent.removeAll(keepingCapacity: true)
            }
            entries.consistent[group] = stamp
        }
    }

    func removeAll() {
        entries.withLock { $0 = Entries() }
    }
}

import SystemCalls

/// Lock files kept open between the writes that take them. Every write takes the store's lock
/// (shared) and its group's (exclusive); opening and closing the two each time were four of a
/// durable set's few dozen system calls.
///
/// A file is lent to one holder at a time and given back unlocked: flock belongs to the open file
/// description, so two threads holding one description would not exclude each other, while two
/// descriptions do, in one process as across processes. A group directory's `.lock` is never
/// removed or replaced (only whole trees of an old key generation go, under other names), so a
/// description opened once stays the lock every other writer takes.
///
/// The pool is bounded, as ``HeldItemFile``s are: a process writing to many services keeps the
/// descriptors of the last few, not one per service.
final class LockPool: Sendable {
    /// Idle files kept per lock: as many as threads that wrote to one group at once.
    static let limitPerLock = 4
    /// Locks (groups, and the store's own) with idle files kept.
    static let limit = 16
    private let idle = Locked<[String: [(directory: Directory, file: LockFile)]]>([:])

    /// An idle file of lock `key` in `directory`, or nil when there is none: the caller opens
    /// one. Files of another `Directory` object under the same key (the group directory was
    /// opened again) are dropped.
    func lend(_ key: String, in directory: Directory) -> LockFile? {
        idle.withLock { idle in
            guard var files = idle[key], !files.isEmpty else { return nil }
            guard files[files.count - 1].directory === directory else {
                idle[key] = nil
                return nil
            }
            let file = files.removeLast().file
            idle[key] = files
            return file
        }
    }

    /// Keeps `file`, unlocked, for the next holder of lock `key` in `directory`.
    func giveBack(_ file: LockFile, _ key: String, in directory: Directory) {
        idle.withLock { idle in
            var files = idle[key] ?? []
            if let first = files.first, first.directory !== directory { files = [] }
            guard files.count < Self.limitPerLock else { return }
            if files.isEmpty, idle.count >= Self.limit, let other = idle.keys.first(where: { $0 != key }) {
                idle[other] = nil
            }
            files.append((directory, file))
            idle[key] = files
        }
    }

    /// Closes every idle file.
    func removeAll() {
        idle.withLock { $0 = [:] }
    }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A lock file held with an exclusive flock(2) for as long as this object lives.
///
/// flock belongs to an open file description, so two `LockFile`s conflict even inside one process,
/// and the kernel drops the lock when its holder dies, however it dies: nothing is ever left
/// locked by a crash. Callers choose how to wait (block, poll with a deadline, say they wait).
package final class LockFile {
    private let descriptor: Int32

    /// Opens `name` (creating it with mode 0600) relative to the directory descriptor `directory`,
    /// or as a path when `directory` is nil, never following a symlink.
    ///
    /// - Throws: `Errno` (ELOOP for a symlink).
    package init(_ name: String, in directory: Int32? = nil) throws(Errno) {
        let base = directory ?? AT_FDCWD
        descriptor = try retryingInterrupts { openat(base, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600) }
    }

    /// Takes the lock. - Returns: false, without waiting, when `wait` is false and someone holds it.
    /// - Throws: `Errno` for any other failure.
    @discardableResult
    package func lock(wait: Bool) throws(Errno) -> Bool {
        do {
            try retryingInterrupts { flock(descriptor, wait ? LOCK_EX : LOCK_EX | LOCK_NB) }
            return true
        } catch where !wait && error.rawValue == EWOULDBLOCK {
            return false
        }
    }

    deinit { closeDescriptor(descriptor) }
}

/// `mkdir -p`: creates every missing directory of the absolute `path` with `mode`; directories
/// that exist are left as they are (their owner and mode are not ours to judge).
///
/// - Throws: `Errno` from the first mkdir that fails for a reason other than EEXIST.
package func createDirectories(_ path: String, mode: UInt32 = 0o700) throws(Errno) {
    var current = ""
    for component in path.split(separator: "/") {
        current += "/" + component
        do {
            try retryingInterrupts { mkdir(current, mode_t(mode)) }
        } catch where error.rawValue == EEXIST {
            continue
        }
    }
}

import WireFormat

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

    /// Opens `name` (creating it with `mode`, 0600 by default) relative to the directory
    /// descriptor `directory`, or as a path when `directory` is nil, never following a symlink.
    ///
    /// - Throws: `Errno` (ELOOP for a symlink).
    package init(_ name: String, in directory: Int32? = nil, mode: UInt32 = 0o600) throws(Errno) {
        let base = directory ?? AT_FDCWD
        descriptor = try retryingInterrupts {
            openat(base, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, mode_t(mode))
        }
        // The umask may have taken group bits a shared store needs; a file that existed keeps its mode.
        if mode != 0o600 { _ = fchmod(descriptor, mode_t(mode)) }
    }

    /// A lock on the directory `directory` itself: a new open file description of it, so the
    /// lock conflicts with every other, in this process too, and no lock file has to be created.
    ///
    /// - Throws: `Errno`.
    package init(directory: Int32) throws(Errno) {
        descriptor = try retryingInterrupts { openat(directory, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
    }

    /// Takes the lock (exclusive, or `shared` with other shared holders).
    /// - Returns: false, without waiting, when `wait` is false and someone holds it.
    /// - Throws: `Errno` for any other failure.
    @discardableResult
    package func lock(wait: Bool, shared: Bool = false) throws(Errno) -> Bool {
        let kind = shared ? LOCK_SH : LOCK_EX
        do {
            try retryingInterrupts { flock(descriptor, wait ? kind : kind | LOCK_NB) }
            return true
        } catch  where !wait && error.rawValue == EWOULDBLOCK {
            return false
        }
    }

    /// Whether `name` (relative to `directory`, or a path) is still this file: false once it was
    /// removed or replaced. A lock file that may be removed (``removeIfUnused(_:)``) is trusted
    /// only after this holds with the lock taken, since the lock may have been taken on a file
    /// removed meanwhile, while others lock the one made after it.
    package func isStill(at name: String, in directory: Int32? = nil) -> Bool {
        Self.isFile(descriptor, at: name, in: directory ?? AT_FDCWD)
    }

    /// Whether `name` names the file open as `descriptor` (same device and inode, not followed).
    private static func isFile(_ descriptor: Int32, at name: String, in directory: Int32) -> Bool {
        var held = stat()
        var named = stat()
        guard fstat(descriptor, &held) == 0, fstatat(directory, name, &named, AT_SYMLINK_NOFOLLOW) == 0 else {
            return false
        }
        return held.st_dev == named.st_dev && held.st_ino == named.st_ino
    }

    /// Removes the lock file at `path` if nobody holds its lock, taking the lock to do it, so a
    /// process that opened it before the removal finds out with ``isStill(at:in:)``.
    ///
    /// - Returns: whether it was removed (false: there is none, or someone holds it).
    @discardableResult
    package static func removeIfUnused(_ path: String) -> Bool {
        let descriptor = openat(AT_FDCWD, path, O_RDWR | O_NOFOLLOW | O_CLOEXEC)
        guard descriptor >= 0 else { return false }
        defer { closeDescriptor(descriptor) }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0, isFile(descriptor, at: path, in: AT_FDCWD) else {
            return false
        }
        return unlink(path) == 0
    }

    /// The file's first byte, nil when the file is empty or unreadable: a note the lock's last
    /// holder left for the next.
    package func firstByte() -> UInt8? {
        var byte: UInt8 = 0
        return pread(descriptor, &byte, 1, 0) == 1 ? byte : nil
    }

    /// Writes the file's first byte.
    /// - Returns: whether the byte was written.
    @discardableResult
    package func setFirstByte(_ byte: UInt8) -> Bool {
        var byte = byte
        return pwrite(descriptor, &byte, 1, 0) == 1
    }

    /// Lets the lock go, keeping the file open for the next ``lock(wait:shared:)``.
    package func unlock() {
        _ = flock(descriptor, LOCK_UN)
    }

    /// Takes the lock, waiting at most `timeout`: a holder that never lets go (stopped, hung on a
    /// device) becomes an error its caller can report instead of a silent hang.
    ///
    /// - Returns: false when the lock was still held after `timeout`.
    /// - Throws: `Errno` for any failure other than contention.
    package func lock(timeout: Duration, shared: Bool = false) throws(Errno) -> Bool {
        // The clock is read only when the lock is busy: a write takes four locks, as a rule free.
        if try lock(wait: false, shared: shared) { return true }
        let deadline = ContinuousClock.now + timeout
        var pause = Duration.microseconds(200)
        while try !lock(wait: false, shared: shared) {
            guard ContinuousClock.now < deadline else { return false }
            sleep(for: pause)
            pause = min(pause * 2, .milliseconds(20))
        }
        return true
    }

    /// The process holding this file's lock, from /proc/locks, for messages: nil when the lock is
    /// free or its holder is not visible (another PID namespace).
    package var holderProcessID: Int32? {
        var status = stat()
        guard fstat(descriptor, &status) == 0 else { return nil }
        let device = UInt64(status.st_dev)
        let major = ((device >> 8) & 0xFFF) | ((device >> 32) & ~0xFFF)
        let minor = (device & 0xFF) | ((device >> 12) & ~0xFF)
        let identity = "\(major.hexString(width: 2)):\(minor.hexString(width: 2)):\(status.st_ino)"
        guard let file = fopen("/proc/locks", "r") else { return nil }
        defer { fclose(file) }
        var line = [CChar](repeating: 0, count: 512)
        // "1: FLOCK  ADVISORY  WRITE 4242 00:2d:1234 0 EOF"; waiters are marked "->" and skipped.
        while fgets(&line, Int32(line.count), file) != nil {
            let fields = String(decoding: line.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
                .split(separator: " ", omittingEmptySubsequences: true)
            guard fields.count >= 6, fields[1] == "FLOCK", fields[5] == identity else { continue }
            return Int32(fields[4])
        }
        return nil
    }

    deinit { closeDescriptor(descriptor) }
}

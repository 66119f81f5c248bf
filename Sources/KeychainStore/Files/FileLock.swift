import SystemCalls
#if canImport(Glibc)
import Glibc
#endif

/// An exclusive `flock` on a lock file, serialising writers across threads and processes.
///
/// flock locks belong to an open file description, so two locks opened separately conflict even
/// inside one process: each writer opens its own. The kernel releases the lock when the holder
/// dies, so a killed writer never leaves the store locked.
final class FileLock {
    private let descriptor: Int32

    /// Blocks until the lock on `name` in `directory` (created 0600 if missing) is held.
    ///
    /// - Throws: ``KeychainError`` `.storageFailed` or `.unsafeFileSystem`.
    init(_ name: String, in directory: Directory) throws(KeychainError) {
        let path = directory.path + "/" + name
        do {
            descriptor = try retryingInterrupts { openat(directory.descriptor, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600) }
        } catch where error.rawValue == ELOOP {
            throw KeychainError(.unsafeFileSystem, "\(path) is a symbolic link; refusing to follow it")
        } catch {
            throw KeychainError(.storageFailed, "Cannot open the lock file \(path)", underlying: error)
        }
        do {
            try retryingInterrupts { flock(descriptor, LOCK_EX) }
        } catch {
            closeDescriptor(descriptor)
            throw KeychainError(.storageFailed, "Cannot lock \(path)", underlying: error)
        }
    }

    deinit { closeDescriptor(descriptor) }
}

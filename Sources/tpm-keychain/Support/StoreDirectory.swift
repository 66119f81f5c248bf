import Foundation
import SystemCalls
#if canImport(Glibc)
import Glibc
#endif

/// The store directory as the CLI sees it, before (and without) opening the store.
enum StoreDirectory {
    /// `path` made absolute against the working directory, `~` expanded, `.` and `..` resolved.
    static func absolute(_ path: String) -> String {
        let expanded = (path as NSString).expandingTildeInPath
        let absolute = expanded.hasPrefix("/") ? expanded : FileManager.default.currentDirectoryPath + "/" + expanded
        return (absolute as NSString).standardizingPath
    }

    /// Creates `path` and any missing parents with mode 0700; existing directories are left as they are.
    ///
    /// - Throws: ``CommandFailure`` when a component cannot be created.
    static func create(_ path: String) throws(CommandFailure) {
        var current = ""
        for component in path.split(separator: "/") {
            current += "/" + component
            do {
                try retryingInterrupts { mkdir(current, 0o700) }
            } catch where error.rawValue == EEXIST {
                continue
            } catch {
                throw CommandFailure(ExitStatus.ioError, "cannot create the directory \(current): \(error)")
            }
        }
    }
}

/// An exclusive `flock` on a file, held until ``release()`` or deinit.
///
/// The embedded simulator's state directory may only be used by one swtpm at a time (swtpm locks
/// it and a second one fails to start), so every CLI process that starts one holds this lock for
/// its whole run. Other processes wait their turn; the kernel drops the lock if we die.
final class FileLock {
    private var descriptor: Int32

    /// - Throws: ``CommandFailure`` when the lock file cannot be opened or locked.
    init(_ path: String, waitingMessage: String) throws(CommandFailure) {
        do {
            descriptor = try retryingInterrupts { open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600) }
        } catch {
            throw CommandFailure(ExitStatus.ioError, "cannot open the lock file \(path): \(error)")
        }
        do {
            do {
                try retryingInterrupts { flock(descriptor, LOCK_EX | LOCK_NB) }
            } catch where error.rawValue == EWOULDBLOCK {
                printError(waitingMessage)
                try retryingInterrupts { flock(descriptor, LOCK_EX) }
            }
        } catch {
            closeDescriptor(descriptor)
            throw CommandFailure(ExitStatus.ioError, "cannot lock \(path): \(error)")
        }
    }

    func release() {
        guard descriptor >= 0 else { return }
        closeDescriptor(descriptor)
        descriptor = -1
    }

    deinit { release() }
}

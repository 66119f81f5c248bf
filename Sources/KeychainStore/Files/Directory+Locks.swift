import KeychainVocabulary
import SystemCalls

#if canImport(Glibc)
import Glibc
#endif

// Lock files in a directory, and the directory's lock on itself: flock with a bounded wait.
extension Directory {
    /// Takes the directory's writer lock (`<directory>/<name>`, an flock held until the returned
    /// object is released), waiting at most `timeout` for writers before us.
    ///
    /// - Throws: ``KeychainError`` `.timedOut` naming the lock and its holder, `.unsafeFileSystem`
    ///   for a symlink, `.permissionDenied`, `.storageFailed`.
    func lock(_ name: String, timeout: Duration) throws(KeychainError) -> LockFile {
        let file = try openLock(name)
        try relock(file, named: name, timeout: timeout)
        return file
    }

    /// The lock file `name`, opened (created when missing) but not locked: for a holder that
    /// keeps it open and locks it with ``relock(_:named:timeout:)`` each time.
    ///
    /// - Throws: ``KeychainError`` `.unsafeFileSystem` (a symlink), `.storageFailed`.
    func openLock(_ name: String) throws(KeychainError) -> LockFile {
        let lockPath = path + "/" + name
        do {
            return try LockFile(name, in: descriptor, mode: UInt32(sharing.fileMode))
        } catch  where error.rawValue == ELOOP {
            throw KeychainError(.unsafeFileSystem, "\(lockPath) is a symbolic link; refusing to follow it")
        } catch  where error.rawValue == EACCES || error.rawValue == EPERM || error.rawValue == EROFS {
            throw Self.permissionDenied(lockPath, error)
        } catch {
            throw KeychainError(.storageFailed, "Cannot open the lock \(lockPath)", underlying: error)
        }
    }

    /// Takes the lock of `file` (opened by ``openLock(_:)``), waiting at most `timeout`.
    ///
    /// - Throws: ``KeychainError`` `.timedOut`, `.storageFailed`.
    func relock(_ file: LockFile, named name: String, timeout: Duration) throws(KeychainError) {
        try Self.take(file, path: path + "/" + name, timeout: timeout, purpose: "writing to it")
    }

    /// Takes an flock on the directory itself, which needs no lock file: used while a store is
    /// opened or created, when nothing may be written yet.
    ///
    /// - Throws: ``KeychainError`` `.timedOut`, `.storageFailed`.
    func lockItself(timeout: Duration, purpose: String, shared: Bool = false) throws(KeychainError) -> LockFile {
        let file = try openLockOnItself()
        try relockItself(file, timeout: timeout, purpose: purpose, shared: shared)
        return file
    }

    /// A new open file description of this directory, to lock it with
    /// ``relockItself(_:timeout:purpose:shared:)`` each time.
    ///
    /// - Throws: ``KeychainError`` `.storageFailed`.
    func openLockOnItself() throws(KeychainError) -> LockFile {
        do {
            return try LockFile(directory: descriptor)
        } catch {
            throw KeychainError(.storageFailed, "Cannot open \(path) to lock it", underlying: error)
        }
    }

    /// Takes the lock of `file`, opened by ``openLockOnItself()``, waiting at most `timeout`.
    ///
    /// - Throws: ``KeychainError`` `.timedOut`, `.storageFailed`.
    func relockItself(_ file: LockFile, timeout: Duration, purpose: String, shared: Bool) throws(KeychainError) {
        try Self.take(file, path: path, timeout: timeout, purpose: purpose, shared: shared)
    }

    /// `path` is formatted only for an error.
    private static func take(
        _ file: LockFile, path: @autoclosure () -> String, timeout: Duration, purpose: String,
        shared: Bool = false
    ) throws(KeychainError) {
        let locked: Bool
        do {
            locked = try file.lock(timeout: timeout, shared: shared)
        } catch {
            throw KeychainError(.storageFailed, "Cannot lock \(path())", underlying: error)
        }
        guard locked else {
            let holder = file.holderProcessID.map { "process \($0)" } ?? "another process"
            throw KeychainError(
                .timedOut,
                "Waited \(timeout) for the lock on \(path()) (\(purpose)); \(holder) still holds it. If that process is stuck, stop it and try again"
            )
        }
    }

    /// `mkdir -p` with mode 0700 for what is missing, its failures as keychain errors.
    ///
    /// - Throws: ``KeychainError`` `.permissionDenied` or `.storageFailed`.
}

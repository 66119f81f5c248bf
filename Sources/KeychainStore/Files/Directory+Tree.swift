package import KeychainVocabulary
import SystemCalls

#if canImport(Glibc)
import Glibc
#endif

// Paths and trees: creating a store's parents, removing an old key generation's directories.
extension Directory {
    package static func createPath(_ path: String) throws(KeychainError) {
        do {
            try createDirectories(path)
        } catch  where error.rawValue == EACCES || error.rawValue == EPERM {
            throw permissionDenied(path, error)
        } catch {
            throw KeychainError(.storageFailed, "Cannot create the directory \(path)", underlying: error)
        }
    }

    static func permissionDenied(_ path: String, _ error: Errno) -> KeychainError {
        KeychainError(
            .permissionDenied,
            "Permission denied: \(path) cannot be used by this user (uid \(Ownership.effectiveUser))", underlying: error
        )
    }

    /// Removes the directory `name` and everything in it (the store's own two-level trees:
    /// directories of regular files). Symlinks are removed, never followed.
    ///
    /// - Returns: false if there was nothing to remove.
    /// - Throws: ``KeychainError`` `.storageFailed`, `.unsafeFileSystem`.
    @discardableResult
    func removeTree(_ name: String) throws(KeychainError) -> Bool {
        guard let directory = try Directory.openAnyOwner(name, in: self) else { return false }
        for entry in try directory.entries() {
            if unlinkat(directory.descriptor, entry, 0) == 0 { continue }
            if errno == EISDIR || errno == EPERM { try directory.removeTree(entry) }
        }
        do {
            try retryingInterrupts { unlinkat(descriptor, name, AT_REMOVEDIR) }
        } catch {
            throw KeychainError(.storageFailed, "Cannot remove \(path)/\(name)", underlying: error)
        }
        return true
    }

    /// Opens a subdirectory for removal: a symlink is refused, the owner is not checked.
    private static func openAnyOwner(_ name: String, in parent: Directory) throws(KeychainError) -> Directory? {
        do {
            let descriptor = try retryingInterrupts {
                openat(parent.descriptor, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            }
            return Directory(descriptor: descriptor, path: parent.path + "/" + name, sharing: parent.sharing)
        } catch  where error.rawValue == ENOENT {
            return nil
        } catch {
            throw KeychainError(.storageFailed, "Cannot open \(parent.path)/\(name)", underlying: error)
        }
    }

    /// fsync of the directory, so renames and unlinks in it are durable.
}

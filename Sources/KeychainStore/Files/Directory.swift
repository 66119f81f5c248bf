import KeychainVocabulary
import SystemCalls

#if canImport(Glibc)
import Glibc
#endif

/// An open, verified directory: every file operation of the store goes through one, relative to
/// its descriptor (openat, renameat, unlinkat, linkat).
///
/// Opening verifies it: O_NOFOLLOW|O_DIRECTORY on the last component, then fstat for owner and
/// mode; ``revalidate()`` repeats the fstat. Operations use the verified inode, so a path swapped
/// for a symlink afterwards is never followed, and each file open walks one component.
package final class Directory: Sendable {
    let descriptor: Int32
    /// For messages only; operations never resolve it again.
    let path: String
    /// Who may use what is in it: its store's choice, inherited from the store's root.
    let sharing: Sharing

    init(descriptor: Int32, path: String, sharing: Sharing) {
        self.descriptor = descriptor
        self.path = path
        self.sharing = sharing
    }

    deinit { closeDescriptor(descriptor) }

    /// Opens `name` inside `parent` (or the absolute `name` when `parent` is nil), creating it
    /// first when `create` is set: mode 0700, or 2770 inside a store shared with a group.
    ///
    /// A directory inside another shares its parent's ``sharing``. A store's root
    /// (`storeRoot`) is shared with a group when it has exactly the shape a shared store is
    /// created with (setgid, group rwx, no access for others); any other directory opened without
    /// a parent must be private.
    ///
    /// - Parameter shareWith: creating a store root: the group it is shared with (nil: private).
    /// - Returns: nil when it does not exist and `create` is false.
    /// - Throws: ``KeychainError`` `.unsafeFileSystem` (a symlink or non-directory, another owner,
    ///   group or world access), `.storageFailed`.
    static func open(
        _ name: String, in parent: Directory?, create: Bool, storeRoot: Bool = false,
        shareWith group: UInt32? = nil
    ) throws(KeychainError) -> Directory? {
        let base = parent?.descriptor ?? AT_FDCWD
        let path = parent.map { $0.path + "/" + name } ?? name
        var created = false
        if create {
            do {
                try retryingInterrupts { mkdirat(base, name, 0o700) }
                created = true
            } catch  where error.rawValue == EEXIST {
            } catch  where error.rawValue == EACCES || error.rawValue == EPERM {
                throw permissionDenied(path, error)
            } catch {
                throw KeychainError(.storageFailed, "Cannot create the directory \(path)", underlying: error)
            }
        }
        let descriptor: Int32
        do {
            descriptor = try retryingInterrupts { openat(base, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
        } catch  where error.rawValue == ENOENT && !create {
            return nil
        } catch  where error.rawValue == ELOOP || error.rawValue == ENOTDIR {
            throw KeychainError(
                .unsafeFileSystem, "\(path) is not a directory (a symlink or file stands there); refusing to use it")
        } catch  where error.rawValue == EACCES || error.rawValue == EPERM {
            throw permissionDenied(path, error)
        } catch {
            throw KeychainError(.storageFailed, "Cannot open the directory \(path)", underlying: error)
        }
        if created {
            // Made private first, then opened to the group: no moment where it is open to more.
            let newSharing: Sharing = parent?.sharing ?? group.map { .group($0) } ?? .owner
            if case .group(let gid) = newSharing {
                guard (parent == nil ? fchown(descriptor, uid_t.max, gid) : 0) == 0,
                    fchmod(descriptor, Sharing.sharedDirectoryMode) == 0
                else {
                    let error = Errno.current
                    closeDescriptor(descriptor)
                    throw KeychainError(
                        .permissionDenied, "Cannot give \(path) to group \(gid) (this user must be a member of it)",
                        underlying: error)
                }
            }
        }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else {
            let error = Errno.current
            closeDescriptor(descriptor)
            throw KeychainError(.storageFailed, "Cannot inspect \(path)", underlying: error)
        }
        let sharing = parent?.sharing ?? (storeRoot ? Sharing(rootStatus: status) : .owner)
        let directory = Directory(descriptor: descriptor, path: path, sharing: sharing)
        try Ownership.check(status, path: path, sharing: sharing)
        if parent == nil, case .group(let group) = sharing, !Sharing.isMember(status.st_uid, of: group) {
            // A shared root made by someone outside the group: not a store the group made.
            throw KeychainError(
                .unsafeFileSystem,
                "\(path) is owned by user \(status.st_uid), who is not a member of its group \(group); refusing to use it as a shared store"
            )
        }
        return directory
    }

    /// Checks the open directory again (one fstat, no path walk): still ours and 0700.
    ///
    /// - Returns: false when it was removed from the file system while we held it open.
    /// - Throws: ``KeychainError`` `.unsafeFileSystem` when its owner or mode changed.
    func revalidate() throws(KeychainError) -> Bool {
        try revalidatedStamp() != nil
    }

    /// As ``revalidate()``, from the same fstat: the directory's ``Stamp``, or nil when it was
    /// removed.
    func revalidatedStamp() throws(KeychainError) -> Stamp? {
        var status = stat()
        guard fstat(descriptor, &status) == 0 else {
            throw KeychainError(.storageFailed, "Cannot inspect \(path)", underlying: Errno.current)
        }
        try Ownership.check(status, path: path, sharing: sharing)
        guard status.st_nlink > 0 else { return nil }
        return Stamp(status)
    }

    /// The user who owns the directory.
    ///
    /// - Throws: ``KeychainError`` `.storageFailed` if fstat fails.
    func owner() throws(KeychainError) -> uid_t {
        var status = stat()
        guard fstat(descriptor, &status) == 0 else {
            throw KeychainError(.storageFailed, "Cannot inspect \(path)", underlying: Errno.current)
        }
        return status.st_uid
    }

    /// What changes whenever an entry is added, removed or renamed: the inode and the
    /// modification time (nanoseconds) of the directory.
    struct Stamp: Hashable, Sendable {
        let inode: UInt64
        let seconds: Int
        let nanoseconds: Int

        init(_ status: stat) {
            inode = UInt64(status.st_ino)
            seconds = status.st_mtim.tv_sec
            nanoseconds = status.st_mtim.tv_nsec
        }
    }

    /// - Throws: ``KeychainError`` `.storageFailed` if fstat fails.
    func stamp() throws(KeychainError) -> Stamp {
        var status = stat()
        guard fstat(descriptor, &status) == 0 else {
            throw KeychainError(.storageFailed, "Cannot inspect \(path)", underlying: Errno.current)
        }
        return Stamp(status)
    }
}

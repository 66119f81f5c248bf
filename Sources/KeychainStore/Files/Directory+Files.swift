import KeychainVocabulary
import SystemCalls

#if canImport(Glibc)
import Glibc
#endif

// The files of a directory: opened, read, replaced atomically and removed relative to its descriptor.
extension Directory {
    /// Opens a regular file for reading after checking it is ours, not group or world accessible,
    /// and singly linked.
    ///
    /// - Returns: nil when the file does not exist.
    /// - Throws: ``KeychainError`` `.unsafeFileSystem` or `.storageFailed`.
    ///
    /// - Parameter writable: opened for reading and writing (``OpenFile/write(_:at:durable:)``).
    func openFile(_ name: String, writable: Bool = false) throws(KeychainError) -> OpenFile? {
        let path = self.path + "/" + name
        let flags = (writable ? O_RDWR : O_RDONLY) | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK
        let fileDescriptor: Int32
        do {
            // A read leaves the access time alone: the first read of each write would otherwise
            // dirty its inode (relatime), a disk write per item a get or listing meets. Only an
            // owner may ask, which every file of a private store has (a foreign one, refused
            // below, is opened again without it); a shared store's files may be another member's.
            if case .owner = sharing {
                do {
                    fileDescriptor = try retryingInterrupts { openat(descriptor, name, flags | noAccessTimeFlag) }
                } catch  where error.rawValue == EPERM {
                    fileDescriptor = try retryingInterrupts { openat(descriptor, name, flags) }
                }
            } else {
                fileDescriptor = try retryingInterrupts { openat(descriptor, name, flags) }
            }
        } catch  where error.rawValue == ENOENT {
            return nil
        } catch  where error.rawValue == ELOOP {
            throw KeychainError(.unsafeFileSystem, "\(path) is a symbolic link; refusing to follow it")
        } catch  where error.rawValue == EACCES || error.rawValue == EPERM {
            throw Self.permissionDenied(path, error)
        } catch {
            throw KeychainError(.storageFailed, "Cannot open \(path)", underlying: error)
        }
        let owner = DescriptorOwner(fileDescriptor)
        var status = stat()
        guard fstat(fileDescriptor, &status) == 0 else {
            throw KeychainError(.storageFailed, "Cannot inspect \(path)", underlying: Errno.current)
        }
        try Self.checkItemFile(status, path: path, sharing: sharing)
        return OpenFile(owner: owner, path: path, status: status)
    }

    /// The file `name` again through the descriptor of `held`, an earlier open of it, when the
    /// name still names that inode on that device: one fstatat instead of openat, fstat and
    /// close. The held descriptor keeps its inode allocated, so no other file can have taken its
    /// number meanwhile. The file's checks are repeated on the new status.
    ///
    /// - Returns: nil when the name now names another file or none: the caller opens it again.
    /// - Throws: ``KeychainError`` `.unsafeFileSystem` (mode, owner, links).
    func reopenFile(_ name: String, heldAs held: OpenFile) throws(KeychainError) -> OpenFile? {
        var status = stat()
        guard fstatat(descriptor, name, &status, AT_SYMLINK_NOFOLLOW) == 0,
            UInt64(status.st_ino) == held.inode, UInt64(status.st_dev) == held.device
        else { return nil }
        try Self.checkItemFile(status, path: held.path, sharing: sharing)
        return OpenFile(owner: held.owner, path: held.path, status: status)
    }

    /// What every file the store reads must be: a regular file with at most one link, owned and
    /// moded as ``Ownership`` requires.
    static func checkItemFile(_ status: stat, path: String, sharing: Sharing) throws(KeychainError) {
        guard status.st_mode & S_IFMT == S_IFREG else {
            throw KeychainError(.unsafeFileSystem, "\(path) is not a regular file")
        }
        // No link means a writer replaced (renamed over) or removed the file between our open and
        // this fstat: what we hold is the complete previous version, which a reader may see; only
        // a second link (a path someone else controls) is refused.
        guard status.st_nlink <= 1 else {
            throw KeychainError(
                .unsafeFileSystem, "\(path) has \(status.st_nlink) hard links; a store file has exactly one")
        }
        try Ownership.check(status, path: path, sharing: sharing)
    }

    /// The inode of the entry `name` (not followed if a symbolic link), or nil when there is none:
    /// one fstatat, to notice a file replaced by rename.
    ///
    /// - Throws: ``KeychainError`` `.storageFailed`.
    func inode(of name: String) throws(KeychainError) -> UInt64? {
        var status = stat()
        if fstatat(descriptor, name, &status, AT_SYMLINK_NOFOLLOW) == 0 { return UInt64(status.st_ino) }
        if errno == ENOENT { return nil }
        throw KeychainError(.storageFailed, "Cannot inspect \(path)/\(name)", underlying: Errno.current)
    }

    /// The version of the entry `name` (not followed if a symbolic link), or nil when there is
    /// none: one fstatat, to notice a file replaced by rename, also when its inode number came back.
    ///
    /// - Throws: ``KeychainError`` `.storageFailed`.
    func identity(of name: String) throws(KeychainError) -> FileIdentity? {
        var status = stat()
        if fstatat(descriptor, name, &status, AT_SYMLINK_NOFOLLOW) == 0 { return FileIdentity(status) }
        if errno == ENOENT { return nil }
        throw KeychainError(.storageFailed, "Cannot inspect \(path)/\(name)", underlying: Errno.current)
    }

    /// The suffix of a file being written; one left behind belongs to a writer that died.
    static let temporarySuffix = ".tmp"

    /// Replaces `name` atomically: `<name>.tmp` written, fsynced, renamed over `name`, then the
    /// directory fsynced so the rename itself is durable. A crash at any point leaves the old file
    /// or the new one, and at worst `<name>.tmp`.
    ///
    /// The caller holds the directory's lock, so no live writer owns `<name>.tmp`: a leftover
    /// belongs to a writer that died and is removed first. One fixed name per target means at most
    /// one leftover per item and no directory scan on the write path.
    ///
    /// - Throws: ``KeychainError`` `.storageFailed`.
    /// - Parameter syncDirectory: false when the caller fsyncs the directory once after many
    ///   replacements (the format upgrade); the file itself is still fsynced when `durable`.
    /// - Parameter keepOpen: returns the new file, open for reading, instead of closing it: what
    ///   a write holds for the next get (``HeldItemFile``). Nil without it, or when the new file
    ///   cannot be inspected after its rename (it is in place all the same).
    @discardableResult
    func replace(
        _ name: String, with bytes: [UInt8], durable: Bool, syncDirectory: Bool = true, keepOpen: Bool = false
    ) throws(KeychainError) -> OpenFile? {
        let temporary = name + Self.temporarySuffix
        // Kept open, the file is read later: without the access time, as openFile reads (the
        // writer owns the file it creates, so it may ask).
        let flags = keepOpen ? O_RDWR | noAccessTimeFlag : O_WRONLY
        let fileDescriptor: Int32
        do {
            try FaultInjection.check(.createTemporary, path: path + "/" + name)
            let create = { () throws(Errno) in
                try retryingInterrupts {
                    openat(self.descriptor, temporary, flags | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
                }
            }
            do {
                fileDescriptor = try create()
            } catch  where error.rawValue == EEXIST {
                // What a writer killed mid-write left (under the same lock, so nobody's live file):
                // removed only when met, which saves every other write an unlink.
                _ = unlinkat(descriptor, temporary, 0)
                fileDescriptor = try create()
            }
        } catch {
            if error.rawValue == EACCES || error.rawValue == EPERM || error.rawValue == EROFS {
                throw Self.permissionDenied(path, error)
            }
            throw Self.writeFailed("create", path + "/" + temporary, error)
        }
        var closed = false
        do {
            // Created private; shared with the store's group (the setgid directory gave it the group).
            if case .group = sharing { try retryingInterrupts { fchmod(fileDescriptor, Sharing.sharedFileMode) } }
            try FaultInjection.check(.write, path: path + "/" + name)
            try Self.writeAll(fileDescriptor, bytes)
            if durable {
                try FaultInjection.check(.syncFile, path: path + "/" + name)
                try retryingInterrupts { fsync(fileDescriptor) }
            }
            if !keepOpen {
                closeDescriptor(fileDescriptor)
                closed = true
            }
            OperationProgress.report(.replacing(name))
            try FaultInjection.check(.rename, path: path + "/" + name)
            try retryingInterrupts { renameat(descriptor, temporary, descriptor, name) }
        } catch {
            if !closed { closeDescriptor(fileDescriptor) }
            _ = unlinkat(descriptor, temporary, 0)
            throw Self.writeFailed("write", path + "/" + name, error)
        }
        let kept = keepOpen ? Self.openFile(owning: fileDescriptor, path: path + "/" + name) : nil
        if durable && syncDirectory {
            do {
                try FaultInjection.check(.syncDirectory, path: path + "/" + name)
            } catch {
                throw Self.writeFailed("sync the directory of", path + "/" + name, error)
            }
            try sync()
        }
        return kept
    }

    /// The file just written through `descriptor`, which it now owns; nil (the descriptor
    /// closed) when it cannot be inspected.
    private static func openFile(owning descriptor: Int32, path: String) -> OpenFile? {
        let owner = DescriptorOwner(descriptor)
        var status = stat()
        guard fstat(descriptor, &status) == 0 else { return nil }
        return OpenFile(owner: owner, path: path, status: status)
    }

    /// A failed write, its cause in words a person acts on: a full disk or quota says so first.
    static func writeFailed(_ action: String, _ path: String, _ error: Errno) -> KeychainError {
        switch error.rawValue {
        case ENOSPC:
            KeychainError(
                .storageFailed,
                "The disk is full: cannot \(action) \(path); stored items are unchanged. Free some space and try again",
                underlying: error)
        case EDQUOT:
            KeychainError(
                .storageFailed, "The disk quota is exhausted: cannot \(action) \(path); stored items are unchanged",
                underlying: error)
        case EIO:
            KeychainError(
                .storageFailed, "The disk reported an I/O error: cannot \(action) \(path); check the device (dmesg)",
                underlying: error)
        default:
            KeychainError(.storageFailed, "Cannot \(action) \(path)", underlying: error)
        }
    }

    /// Creates `name` with `bytes` only if nothing exists there (linkat of a complete temporary
    /// file, so a reader never sees a partial file and two creators cannot both win).
    ///
    /// - Returns: false if the file already existed.
    func createExclusively(_ name: String, with bytes: [UInt8]) throws(KeychainError) -> Bool {
        let temporary = name + ".new"
        try replace(temporary, with: bytes, durable: true)
        defer { _ = unlinkat(descriptor, temporary, 0) }
        do {
            try retryingInterrupts { linkat(descriptor, temporary, descriptor, name, 0) }
        } catch  where error.rawValue == EEXIST {
            return false
        } catch {
            throw KeychainError(.storageFailed, "Cannot create \(path)/\(name)", underlying: error)
        }
        try sync()
        return true
    }

    /// Writes `bytes` into the existing file `name` at `offset` and cuts the file there: an
    /// append to a log whose torn tail (a writer that died mid-write) is overwritten. The file is
    /// checked as ``openFile(_:)`` checks it; `durable` adds an fdatasync.
    ///
    /// - Throws: ``KeychainError`` `.tampered` when the file is gone, `.unsafeFileSystem`,
    ///   `.permissionDenied`, `.storageFailed` naming the cause.
    func overwrite(_ name: String, at offset: Int, with bytes: [UInt8], durable: Bool) throws(KeychainError) {
        // O_NONBLOCK (in openFile): a FIFO planted at the name must not block the writer; it is
        // refused as not a regular file.
        guard let file = try openFile(name, writable: true) else {
            throw KeychainError(.tampered, "\(path)/\(name) is missing")
        }
        try file.write(bytes, at: offset, durable: durable)
    }

    /// Removes a file. - Returns: false if it did not exist.
    func remove(_ name: String, durable: Bool) throws(KeychainError) -> Bool {
        do {
            try retryingInterrupts { unlinkat(descriptor, name, 0) }
        } catch  where error.rawValue == ENOENT {
            return false
        } catch {
            throw KeychainError(.storageFailed, "Cannot remove \(path)/\(name)", underlying: error)
        }
        if durable { try sync() }
        return true
    }

    /// The names in the directory (not . and ..).
    ///
    /// Read through a descriptor of its own, opened on this directory's ".": a dup would share
    /// its position with ``descriptor``, and with every other thread listing this directory,
    /// so that two listings at once would each see part of it (or nothing).
    func entries() throws(KeychainError) -> [String] {
        let own: Int32
        do {
            own = try retryingInterrupts { openat(descriptor, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        } catch {
            throw KeychainError(.storageFailed, "Cannot list \(path)", underlying: error)
        }
        guard let stream = fdopendir(own) else {
            let error = Errno.current
            closeDescriptor(own)
            throw KeychainError(.storageFailed, "Cannot list \(path)", underlying: error)
        }
        defer { closedir(stream) }
        var names: [String] = []
        while let entry = readdir(stream) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    func sync() throws(KeychainError) {
        do {
            try retryingInterrupts { fsync(descriptor) }
        } catch {
            throw Self.writeFailed("sync the directory", path, error)
        }
    }

    private static func writeAll(_ descriptor: Int32, _ bytes: [UInt8]) throws(Errno) {
        var offset = 0
        while offset < bytes.count {
            let written = try retryingInterrupts {
                bytes.withUnsafeBytes { raw in write(descriptor, raw.baseAddress! + offset, raw.count - offset) }
            }
            offset += written
        }
    }
}

import SystemCalls
#if canImport(Glibc)
import Glibc
#endif

/// Suspicious reads and atomic, durable writes.
///
/// Every directory is 0700 and every file 0600, owned by this user; anything else (a symlink, a
/// hard link, another owner, group or world access, a non-regular file) is refused rather than
/// repaired, because it means someone other than this user has been in the store.
enum SecureFileSystem {
    /// Creates `path` (mode 0700) if missing and checks it is a safe directory.
    ///
    /// - Throws: ``KeychainError`` `.unsafeFileSystem` or `.storageFailed`.
    static func ensureDirectory(_ path: String, create: Bool = true) throws(KeychainError) {
        if create {
            do {
                try retryingInterrupts { mkdir(path, 0o700) }
            } catch where error.rawValue == EEXIST {
            } catch {
                throw KeychainError(.storageFailed, "Cannot create the directory \(path)", underlying: error)
            }
        }
        var status = stat()
        do {
            try retryingInterrupts { lstat(path, &status) }
        } catch {
            throw KeychainError(.storageFailed, "Cannot inspect \(path)", underlying: error)
        }
        guard status.st_mode & S_IFMT == S_IFDIR else {
            throw KeychainError(.unsafeFileSystem, "\(path) is not a directory (a symlink or file stands there); refusing to use it")
        }
        try checkOwnership(status, path: path)
    }

    /// Checks a directory that may not exist: false when it does not, true when it is a safe
    /// directory. Reads go through here, since O_NOFOLLOW guards only a path's last component.
    ///
    /// - Throws: ``KeychainError`` `.unsafeFileSystem` for a symlink, another owner or a loose mode.
    static func checkDirectoryIfPresent(_ path: String) throws(KeychainError) -> Bool {
        var status = stat()
        guard lstat(path, &status) == 0 else {
            if errno == ENOENT { return false }
            throw KeychainError(.storageFailed, "Cannot inspect \(path)", underlying: Errno.current)
        }
        guard status.st_mode & S_IFMT == S_IFDIR else {
            throw KeychainError(.unsafeFileSystem, "\(path) is not a directory (a symlink or file stands there); refusing to use it")
        }
        try checkOwnership(status, path: path)
        return true
    }

    /// Whether a directory exists (without following a symlink).
    static func directoryExists(_ path: String) -> Bool {
        var status = stat()
        return lstat(path, &status) == 0 && status.st_mode & S_IFMT == S_IFDIR
    }

    /// Opens a regular file for reading after checking it is ours, 0600-ish and singly linked.
    ///
    /// - Returns: nil when the file does not exist.
    /// - Throws: ``KeychainError`` `.unsafeFileSystem` or `.storageFailed`.
    static func openForReading(_ path: String) throws(KeychainError) -> OpenFile? {
        let descriptor: Int32
        do {
            descriptor = try retryingInterrupts { open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK) }
        } catch where error.rawValue == ENOENT {
            return nil
        } catch where error.rawValue == ELOOP {
            throw KeychainError(.unsafeFileSystem, "\(path) is a symbolic link; refusing to follow it")
        } catch {
            throw KeychainError(.storageFailed, "Cannot open \(path)", underlying: error)
        }
        let file = OpenFile(descriptor: descriptor, path: path)
        var status = stat()
        guard fstat(descriptor, &status) == 0 else {
            throw KeychainError(.storageFailed, "Cannot inspect \(path)", underlying: Errno.current)
        }
        guard status.st_mode & S_IFMT == S_IFREG else {
            throw KeychainError(.unsafeFileSystem, "\(path) is not a regular file")
        }
        guard status.st_nlink == 1 else {
            throw KeychainError(.unsafeFileSystem, "\(path) has \(status.st_nlink) hard links; a store file has exactly one")
        }
        try checkOwnership(status, path: path)
        file.size = Int(status.st_size)
        return file
    }

    /// Replaces `path` atomically: `<path>.tmp` in the same directory, written, fsynced, renamed
    /// over the target, then the directory fsynced so the rename itself is durable. A crash at any
    /// point leaves the old file or the new one, and at worst `<path>.tmp`.
    ///
    /// The caller holds the directory's lock, so no live writer owns `<path>.tmp`: a leftover
    /// belongs to a writer that died and is removed first. One fixed name per target means at most
    /// one leftover per item and no directory scan on the write path.
    ///
    /// - Throws: ``KeychainError`` `.storageFailed`.
    static func replace(_ path: String, with bytes: [UInt8], durable: Bool) throws(KeychainError) {
        let directory = parentDirectory(of: path)
        let temporary = path + temporarySuffix
        _ = unlink(temporary)
        let descriptor: Int32
        do {
            descriptor = try retryingInterrupts { open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600) }
        } catch {
            throw KeychainError(.storageFailed, "Cannot create \(temporary)", underlying: error)
        }
        do {
            try writeAll(descriptor, bytes)
            if durable { try retryingInterrupts { fsync(descriptor) } }
            closeDescriptor(descriptor)
            try retryingInterrupts { rename(temporary, path) }
        } catch {
            closeDescriptor(descriptor)
            unlink(temporary)
            throw KeychainError(.storageFailed, "Cannot write \(path)", underlying: error)
        }
        if durable { try syncDirectory(directory) }
    }

    /// Creates `path` with `bytes` only if nothing exists there (link(2) of a complete temporary
    /// file, so a reader never sees a partial file and two creators cannot both win).
    ///
    /// - Returns: false if the file already existed.
    static func createExclusively(_ path: String, with bytes: [UInt8]) throws(KeychainError) -> Bool {
        let temporary = path + ".new"
        try replace(temporary, with: bytes, durable: true)
        defer { unlink(temporary) }
        do {
            try retryingInterrupts { link(temporary, path) }
        } catch where error.rawValue == EEXIST {
            return false
        } catch {
            throw KeychainError(.storageFailed, "Cannot create \(path)", underlying: error)
        }
        try syncDirectory(parentDirectory(of: path))
        return true
    }

    /// Removes a file, durably. - Returns: false if it did not exist.
    static func remove(_ path: String, durable: Bool) throws(KeychainError) -> Bool {
        do {
            try retryingInterrupts { unlink(path) }
        } catch where error.rawValue == ENOENT {
            return false
        } catch {
            throw KeychainError(.storageFailed, "Cannot remove \(path)", underlying: error)
        }
        if durable { try syncDirectory(parentDirectory(of: path)) }
        return true
    }

    /// Removes an empty directory; a directory that is not empty (another writer) is left.
    static func removeDirectoryIfEmpty(_ path: String) {
        _ = rmdir(path)
    }

    /// The names in a directory (not . and ..). - Returns: empty when the directory does not exist.
    static func entries(of path: String) throws(KeychainError) -> [String] {
        guard let stream = opendir(path) else {
            if errno == ENOENT { return [] }
            throw KeychainError(.storageFailed, "Cannot list \(path)", underlying: Errno.current)
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

    /// The suffix of a file being written; one left behind belongs to a writer that died.
    static let temporarySuffix = ".tmp"

    static func syncDirectory(_ path: String) throws(KeychainError) {
        do {
            let descriptor = try retryingInterrupts { open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
            defer { closeDescriptor(descriptor) }
            try retryingInterrupts { fsync(descriptor) }
        } catch {
            throw KeychainError(.storageFailed, "Cannot sync the directory \(path)", underlying: error)
        }
    }

    static func parentDirectory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
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

    private static func checkOwnership(_ status: stat, path: String) throws(KeychainError) {
        guard status.st_uid == geteuid() else {
            throw KeychainError(.unsafeFileSystem, "\(path) belongs to user \(status.st_uid), not to this user (\(geteuid())); refusing to use it")
        }
        guard status.st_mode & 0o077 == 0 else {
            let mode = String(status.st_mode & 0o777, radix: 8)
            throw KeychainError(.unsafeFileSystem, "\(path) has mode \(mode); the keychain requires 0700 directories and 0600 files")
        }
    }
}

/// A file open for reading; closed when released.
final class OpenFile {
    let descriptor: Int32
    let path: String
    var size = 0

    init(descriptor: Int32, path: String) {
        self.descriptor = descriptor
        self.path = path
    }

    deinit { closeDescriptor(descriptor) }

    /// Reads exactly `count` bytes at `offset`.
    ///
    /// - Throws: ``KeychainError`` `.tampered` when the file is shorter, `.storageFailed` on I/O errors.
    func read(count: Int, at offset: Int) throws(KeychainError) -> [UInt8] {
        guard count >= 0, offset >= 0, offset + count <= size else {
            throw KeychainError(.tampered, "\(path) is truncated")
        }
        var buffer = [UInt8](repeating: 0, count: count)
        var done = 0
        while done < count {
            let read: Int
            do {
                read = try retryingInterrupts {
                    buffer.withUnsafeMutableBytes { raw in pread(descriptor, raw.baseAddress! + done, count - done, off_t(offset + done)) }
                }
            } catch {
                throw KeychainError(.storageFailed, "Cannot read \(path)", underlying: error)
            }
            guard read > 0 else { throw KeychainError(.tampered, "\(path) is truncated") }
            done += read
        }
        return buffer
    }
}

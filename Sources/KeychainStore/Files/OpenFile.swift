import KeychainVocabulary
import SystemCalls

#if canImport(Glibc)
import Glibc
#endif

/// A file open for reading; closed when released.
final class OpenFile {
    /// Closes the file when the last user lets go: this open file, and ``HeldItemFile`` when it
    /// keeps the descriptor for the next get.
    let owner: DescriptorOwner
    let path: String
    var size: Int
    /// The inode and its change time when opened: which version of the name this is.
    let identity: FileIdentity
    /// The file system the file is on: with the inode, which file this is while it is open.
    let device: UInt64
    var inode: UInt64 { identity.inode }
    var descriptor: Int32 { owner.descriptor }

    /// `status` is the descriptor's fstat, which the caller has checked.
    init(owner: DescriptorOwner, path: String, status: stat) {
        self.owner = owner
        self.path = path
        size = Int(status.st_size)
        identity = FileIdentity(status)
        device = UInt64(status.st_dev)
    }

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
                    buffer.withUnsafeMutableBytes { raw in
                        pread(descriptor, raw.baseAddress! + done, count - done, off_t(offset + done))
                    }
                }
            } catch {
                throw KeychainError(.storageFailed, "Cannot read \(path)", underlying: error)
            }
            guard read > 0 else { throw KeychainError(.tampered, "\(path) is truncated") }
            done += read
        }
        return buffer
    }

    /// Writes `bytes` at `offset` of a file opened writable, cuts off what lay beyond them, and
    /// with `durable` waits for the data to reach the disk, as ``Directory/overwrite(_:at:with:durable:)``.
    ///
    /// - Throws: ``KeychainError`` `.storageFailed` (a full disk says so).
    func write(_ bytes: [UInt8], at offset: Int, durable: Bool) throws(KeychainError) {
        do {
            try FaultInjection.check(.write, path: path)
            var done = 0
            while done < bytes.count {
                let written = try retryingInterrupts {
                    bytes.withUnsafeBytes { raw in
                        pwrite(descriptor, raw.baseAddress! + done, raw.count - done, off_t(offset + done))
                    }
                }
                done += written
            }
            if size > offset + bytes.count {
                try retryingInterrupts { ftruncate(descriptor, off_t(offset + bytes.count)) }
            }
            size = offset + bytes.count
            if durable {
                try FaultInjection.check(.syncFile, path: path)
                try retryingInterrupts { fdatasync(descriptor) }
            }
        } catch {
            throw Directory.writeFailed("write", path, error)
        }
    }
}

/// An open descriptor, closed when the last reference goes.
final class DescriptorOwner: Sendable {
    let descriptor: Int32

    init(_ descriptor: Int32) { self.descriptor = descriptor }

    deinit { closeDescriptor(descriptor) }
}

/// One version of a file that is replaced by rename: its inode number and the time its inode last
/// changed (ctime, to the nanosecond; a rename sets it). An inode number alone names a version
/// only until the file system reuses it, which ext4 does at once for a file created just after
/// another was freed: a process that remembered the number of a file replaced twice since could
/// take the second replacement for the version it knows.
struct FileIdentity: Hashable, Sendable {
    let inode: UInt64
    let changed: Int64

    init(inode: UInt64, changed: Int64) {
        self.inode = inode
        self.changed = changed
    }

    init(_ status: stat) {
        inode = UInt64(status.st_ino)
        changed = Int64(status.st_ctim.tv_sec) * 1_000_000_000 + Int64(status.st_ctim.tv_nsec)
    }
}

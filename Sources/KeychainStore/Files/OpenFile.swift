import KeychainVocabulary
import SystemCalls

#if canImport(Glibc)
import Glibc
#endif

/// A file open for reading; closed when released.
final class OpenFile {
    let descriptor: Int32
    let path: String
    var size = 0
    var inode: UInt64 = 0
    /// The inode and its change time when opened: which version of the name this is.
    var identity = FileIdentity(inode: 0, changed: 0)

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

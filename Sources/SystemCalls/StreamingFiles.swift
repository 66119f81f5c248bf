#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A file written from start to end in pieces (an export archive): created with mode 0600,
/// never over an existing file or through a symbolic link, and removed again unless
/// ``finish()`` is reached, so a failed or interrupted writer leaves no partial file behind
/// under the name it was asked for.
package final class StreamingOutputFile {
    package let path: String
    private var descriptor: Int32
    private var buffer: [UInt8] = []
    private static let bufferSize = 1 << 16

    /// - Throws: `Errno` (EEXIST when the path exists, ELOOP for a symbolic link).
    package init(creating path: String) throws(Errno) {
        self.path = path
        descriptor = try retryingInterrupts { open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600) }
        buffer.reserveCapacity(Self.bufferSize)
    }

    deinit { abandon() }

    package func write(_ bytes: some Collection<UInt8>) throws(Errno) {
        buffer.append(contentsOf: bytes)
        if buffer.count >= Self.bufferSize { try flush() }
    }

    private func flush() throws(Errno) {
        var offset = 0
        while offset < buffer.count {
            let written = try retryingInterrupts {
                buffer.withUnsafeBytes { raw in
                    Glibc.write(descriptor, raw.baseAddress.map { $0 + offset }, raw.count - offset)
                }
            }
            offset += written
        }
        buffer.removeAll(keepingCapacity: true)
    }

    /// Writes what is buffered, flushes it to disk and closes the file, which then stays.
    package func finish() throws(Errno) {
        try flush()
        try retryingInterrupts { fsync(descriptor) }
        closeDescriptor(descriptor)
        descriptor = -1
    }

    /// Closes and removes the file, unless ``finish()`` kept it. Idempotent.
    package func abandon() {
        guard descriptor >= 0 else { return }
        closeDescriptor(descriptor)
        descriptor = -1
        _ = unlink(path)
    }
}

/// A file read from start to end in pieces, and again from the start (an archive checked
/// before it is imported).
package final class StreamingInputFile {
    package let path: String
    private let descriptor: Int32

    /// - Throws: `Errno` (ENOENT, EACCES, EISDIR when it is a directory).
    package init(reading path: String) throws(Errno) {
        self.path = path
        descriptor = try retryingInterrupts { open(path, O_RDONLY | O_CLOEXEC) }
        var status = stat()
        do {
            try retryingInterrupts { fstat(descriptor, &status) }
        } catch {
            closeDescriptor(descriptor)
            throw error
        }
        guard status.st_mode & S_IFMT == S_IFREG else {
            closeDescriptor(descriptor)
            throw Errno(rawValue: status.st_mode & S_IFMT == S_IFDIR ? EISDIR : EINVAL)
        }
    }

    deinit { closeDescriptor(descriptor) }

    /// Up to `count` bytes: fewer only at the end of the file.
    package func read(upTo count: Int) throws(Errno) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        var filled = 0
        while filled < count {
            let got = try retryingInterrupts {
                bytes.withUnsafeMutableBytes { raw in
                    Glibc.read(descriptor, raw.baseAddress.map { $0 + filled }, count - filled)
                }
            }
            if got == 0 { break }
            filled += got
        }
        bytes.removeSubrange(filled...)
        return bytes
    }

    /// Back to the first byte.
    package func rewind() throws(Errno) {
        try retryingInterrupts { lseek(descriptor, 0, SEEK_SET) }
    }
}

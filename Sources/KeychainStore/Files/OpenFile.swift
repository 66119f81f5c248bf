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
}

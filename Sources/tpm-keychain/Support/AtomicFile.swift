import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Durable, atomic replacement of a small file with mode 0600: temp file, fsync, rename, and an
/// fsync of the directory so the rename itself survives a crash.
enum AtomicFile {
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    static func write(_ bytes: [UInt8], to path: String) throws {
        let directory = (path as NSString).deletingLastPathComponent
        let temporary = path + ".tmp-\(getpid())"
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard descriptor >= 0 else { throw Failure(description: "cannot create \(temporary): \(String(cString: strerror(errno)))") }
        var written = 0
        while written < bytes.count {
            let result = bytes.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress! + written, bytes.count - written) }
            if result < 0 && errno == EINTR { continue }
            guard result > 0 else {
                close(descriptor)
                unlink(temporary)
                throw Failure(description: "cannot write \(temporary): \(String(cString: strerror(errno)))")
            }
            written += result
        }
        guard fsync(descriptor) == 0, close(descriptor) == 0, rename(temporary, path) == 0 else {
            unlink(temporary)
            throw Failure(description: "cannot store \(path): \(String(cString: strerror(errno)))")
        }
        let directoryDescriptor = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if directoryDescriptor >= 0 {
            fsync(directoryDescriptor)
            close(directoryDescriptor)
        }
    }

    /// Creates `path` and its parents with mode 0700.
    static func makeDirectory(_ path: String) throws {
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
    }
}

#if canImport(Glibc)
import Glibc
#endif

/// Writes all of `bytes` to `descriptor`: short writes go on, EINTR is retried.
///
/// - Throws: `Errno` from write(2); a write of nothing (a full device that accepts no byte) is EIO.
package func writeAll(_ descriptor: Int32, _ bytes: [UInt8]) throws(Errno) {
    var offset = 0
    while offset < bytes.count {
        let written = try retryingInterrupts {
            bytes[offset...].withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
        }
        guard written > 0 else { throw Errno(rawValue: EIO) }
        offset += written
    }
}

/// Writes `text` to standard error, whole. A message that cannot be written has nowhere else to
/// go, so a failure is dropped. Instead of Foundation's `FileHandle`, which brings its string
/// machinery and ICU into a static binary.
package func writeStandardError(_ text: String) {
    try? writeAll(STDERR_FILENO, Array(text.utf8))
}

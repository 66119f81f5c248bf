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

/// Sends `bytes` on the connected socket `descriptor`, whole, retrying interrupted sends. With
/// MSG_NOSIGNAL: a peer that hung up is an error (EPIPE) for this call, never the SIGPIPE that
/// would end the whole process, as it would a server's for one client leaving early.
///
/// - Throws: ``Errno`` from send(2), or EIO when nothing could be sent.
package func sendAll(_ descriptor: Int32, _ bytes: [UInt8]) throws(Errno) {
    var offset = 0
    while offset < bytes.count {
        let sent = try retryingInterrupts {
            bytes[offset...].withUnsafeBytes { send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        }
        guard sent > 0 else { throw Errno(rawValue: EIO) }
        offset += sent
    }
}

/// Writes `text` to standard error, whole. A message that cannot be written has nowhere else to
/// go, so a failure is dropped. Instead of Foundation's `FileHandle`, which brings its string
/// machinery and ICU into a static binary.
package func writeStandardError(_ text: String) {
    try? writeAll(STDERR_FILENO, Array(text.utf8))
}

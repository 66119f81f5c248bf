#if canImport(Glibc)
import Glibc
#endif

/// Writes `text` to standard error, whole: short writes go on, EINTR is retried. A message that
/// cannot be written has nowhere else to go, so a failure ends the attempt silently. Instead of
/// Foundation's `FileHandle`, which brings its string machinery and ICU into a static binary.
package func writeStandardError(_ text: String) {
    var bytes = Array(text.utf8)
    var offset = 0
    while offset < bytes.count {
        let written = bytes.withUnsafeMutableBytes { raw in
            write(STDERR_FILENO, raw.baseAddress! + offset, raw.count - offset)
        }
        if written < 0 && errno == EINTR { continue }
        guard written > 0 else { return }
        offset += written
    }
}

internal import CTSS2
#if canImport(Glibc)
import Glibc
#endif

/// A failed system call: the call's name and `errno`.
struct SystemCallError: Error, CustomStringConvertible {
    let call: String
    let errno: Int32
    var description: String { "\(call): \(String(cString: strerror(errno)))" }
}

/// Runs a system call, retrying while it is interrupted by a signal (EINTR).
///
/// - Throws: ``SystemCallError`` carrying `errno` when the call returns -1.
@discardableResult
func retryingInterrupts<T: FixedWidthInteger>(_ call: String, _ body: () -> T) throws(SystemCallError) -> T {
    while true {
        let result = body()
        if result != -1 { return result }
        let code = errno
        if code == EINTR { continue }
        throw SystemCallError(call: call, errno: code)
    }
}

/// The kernel's CSPRNG.
enum SystemRandom {
    /// - Throws: ``SystemCallError`` if `getrandom` fails for a reason other than EINTR.
    static func fill(_ buffer: UnsafeMutableRawBufferPointer) throws(SystemCallError) {
        var offset = 0
        while offset < buffer.count {
            let read = try retryingInterrupts("getrandom") {
                ctss2_getrandom(buffer.baseAddress! + offset, buffer.count - offset)
            }
            offset += read
        }
    }
}

internal import CTSS2
import SystemCalls
#if canImport(Glibc)
import Glibc
#endif

/// The kernel's CSPRNG.
enum SystemRandom {
    /// - Throws: `Errno` if `getrandom` fails for a reason other than EINTR.
    static func fill(_ buffer: UnsafeMutableRawBufferPointer) throws(Errno) {
        var offset = 0
        while offset < buffer.count {
            let read = try retryingInterrupts {
                ctss2_getrandom(buffer.baseAddress! + offset, buffer.count - offset)
            }
            offset += read
        }
    }
}

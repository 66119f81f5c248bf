internal import CSystemCalls
package import SystemCalls

#if canImport(Glibc)
import Glibc
#endif

/// The kernel's CSPRNG.
package enum SystemRandom {
    /// - Throws: `Errno` if `getrandom` fails for a reason other than EINTR.
    package static func fill(_ buffer: UnsafeMutableRawBufferPointer) throws(Errno) {
        var offset = 0
        while offset < buffer.count {
            let read = try retryingInterrupts {
                tk_getrandom(buffer.baseAddress! + offset, buffer.count - offset)
            }
            offset += read
        }
    }

    /// `count` fresh bytes from the kernel's CSPRNG: the one path every target takes for salts,
    /// nonces and IDs. getrandom(2) without flags blocks only before the pool is first seeded,
    /// and never fails afterwards, so a failure here is a broken system, not an input error.
    package static func bytes(_ count: Int) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        bytes.withUnsafeMutableBytes { buffer in
            do {
                try fill(buffer)
            } catch {
                preconditionFailure("getrandom failed: \(error)")
            }
        }
        return bytes
    }
}

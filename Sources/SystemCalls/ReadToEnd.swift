import CSystemCalls

#if canImport(Glibc)
import Glibc
#endif

/// Reads `descriptor` until its end, or until `limit` bytes are in, for output that may be secret
/// (an askpass program's passcode, gpg's plaintext): the read buffer is erased after use, and so
/// is each storage the result outgrows, so no copy of the bytes is left behind in freed memory.
/// The caller erases the result when done with it.
package func readToEnd(_ descriptor: Int32, atMost limit: Int) -> [UInt8] {
    var bytes: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65536)
    defer { erase(&buffer) }
    while bytes.count < limit {
        let wanted = min(buffer.count, limit - bytes.count)
        let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, wanted) }
        if count > 0 {
            // Grown by copying: the old storage keeps the bytes, so it is erased first.
            if bytes.count + count > bytes.capacity {
                var grown = [UInt8]()
                grown.reserveCapacity(max(2 * bytes.capacity, bytes.count + count))
                grown.append(contentsOf: bytes)
                erase(&bytes)
                bytes = grown
            }
            bytes.append(contentsOf: buffer[0..<count])
        } else if count < 0, errno == EINTR {
            continue
        } else {
            break
        }
    }
    return bytes
}

/// Overwrites `bytes` with zeros in a way the optimizer keeps (explicit_bzero).
package func erase(_ bytes: inout [UInt8]) {
    bytes.withUnsafeMutableBytes { tk_secure_zero($0.baseAddress, $0.count) }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// `mkdir -p`: creates every missing directory of the absolute `path` with `mode`; directories
/// that exist are left as they are (their owner and mode are not ours to judge).
///
/// - Throws: `Errno` from the first mkdir that fails for a reason other than EEXIST.
package func createDirectories(_ path: String, mode: UInt32 = 0o700) throws(Errno) {
    var current = ""
    for component in path.split(separator: "/") {
        current += "/" + component
        do {
            try retryingInterrupts { mkdir(current, mode_t(mode)) }
        } catch  where error.rawValue == EEXIST {
            continue
        }
    }
}

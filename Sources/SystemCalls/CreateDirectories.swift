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
    // Usually the whole path is there already (a per-user cache directory, made on first use):
    // one mkdir tells, instead of one per component.
    do {
        try retryingInterrupts { mkdir(path, mode_t(mode)) }
        return
    } catch  where error.rawValue == EEXIST {
        return
    } catch  where error.rawValue == ENOENT {
        // A parent is missing: make each one, in order.
    }
    var current = ""
    for component in path.split(separator: "/") {
        // Not `"/" + component`: String + Substring is the generic `+`, whose first use in a
        // process looks up a protocol conformance over the whole binary.
        current.append("/")
        current.append(contentsOf: component)
        do {
            try retryingInterrupts { mkdir(current, mode_t(mode)) }
        } catch  where error.rawValue == EEXIST {
            continue
        }
    }
}

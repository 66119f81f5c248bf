// The one place where TPMKeychain's targets talk to libc for calls that can fail: every call that can fail goes through
// `retryingInterrupts` (or `spawnResult` for the posix_spawn family), so EINTR is retried in one
// place and every failure surfaces as a typed `Errno` instead of a bare -1.
// Modeled on apple/swift-system's Internals/Syscalls.swift.

// Public imports and a public `Errno`: `retryingInterrupts` is inlinable, and an inlinable body
// that other modules compile may only name public declarations. SystemCalls is no product.
#if canImport(Glibc)
public import Glibc
#elseif canImport(Musl)
public import Musl
#elseif canImport(Darwin)
public import Darwin
#endif

/// A POSIX error number, thrown by the syscall wrappers.
public struct Errno: Error, Equatable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: Int32

    public init(rawValue: Int32) { self.rawValue = rawValue }

    /// The calling thread's current `errno`.
    package static var current: Errno { Errno(rawValue: errno) }

    public var description: String {
        // strerror returns static strings for every errno glibc knows; copy it out immediately.
        "\(String(cString: strerror(rawValue))) (errno \(rawValue))"
    }
}

/// Runs a call that reports failure as `-1` plus `errno`, retrying while it is interrupted by a
/// signal. Test runners deliver signals to arbitrary threads, so EINTR is an ordinary outcome.
///
/// - Throws: `Errno` for any failure other than EINTR.
///
/// Inlinable so that each call site gets it specialised for its result type: the generic body
/// asked the integer's witness table for `isSigned` and `bitWidth` on every system call.
@inlinable @discardableResult
public func retryingInterrupts<T: FixedWidthInteger>(_ body: () -> T) throws(Errno) -> T {
    while true {
        let result = body()
        if result != -1 { return result }
        let error = errno
        if error == EINTR { continue }
        throw Errno(rawValue: error)
    }
}

/// The posix_spawn family returns the error number instead of setting `errno`.
///
/// - Throws: `Errno` when `body` returns non-zero.
package func spawnResult(_ body: () -> Int32) throws(Errno) {
    let result = body()
    if result != 0 { throw Errno(rawValue: result) }
}

/// Sleeps without being cut short by signals (nanosleep reports the remainder on EINTR).
package func sleep(for duration: Duration) {
    let (seconds, attoseconds) = duration.components
    guard seconds > 0 || attoseconds > 0 else { return }
    var request = timespec(tv_sec: Int(seconds), tv_nsec: Int(attoseconds / 1_000_000_000))
    var remaining = timespec()
    while nanosleep(&request, &remaining) == -1 && errno == EINTR {
        request = remaining
    }
}

/// Closes a descriptor. Linux always releases the descriptor, even when close reports EINTR,
/// so retrying could close an unrelated descriptor another thread just opened: never retry.
package func closeDescriptor(_ fd: Int32) {
    _ = close(fd)
}

/// O_NOATIME, which Glibc's Swift module does not export (it is a GNU extension): opening a file
/// with it leaves the file's access time alone. The asm-generic value, which x86_64 and aarch64
/// use; 0 (no effect) elsewhere. The kernel allows it only to the file's owner (or CAP_FOWNER) and
/// refuses it with EPERM otherwise.
#if arch(x86_64) || arch(arm64)
package let noAccessTimeFlag: Int32 = 0o1000000
#else
package let noAccessTimeFlag: Int32 = 0
#endif

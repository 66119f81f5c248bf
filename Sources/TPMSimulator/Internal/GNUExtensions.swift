// Swift's Glibc module is imported without _GNU_SOURCE, so the atomic close-on-exec calls
// (pipe2, accept4) are invisible to Swift even though libc exports them. They are resolved at
// run time instead; without them a descriptor could leak into a child spawned concurrently by
// another thread.

import SystemCalls

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

enum GNUExtensions {
    typealias Pipe2 = @convention(c) (UnsafeMutablePointer<Int32>?, Int32) -> Int32
    typealias Accept4 =
        @convention(c) (Int32, UnsafeMutablePointer<sockaddr>?, UnsafeMutablePointer<socklen_t>?, Int32) -> Int32

    // C function pointers from libc are immutable and callable from any thread.
    static let pipe2: Pipe2? = symbol("pipe2")
    static let accept4: Accept4? = symbol("accept4")

    private static func symbol<Function>(_ name: String) -> Function? {
        // A nil handle is RTLD_DEFAULT: search the global symbol scope (libc is always in it).
        guard let address = dlsym(nil, name) else { return nil }
        return unsafeBitCast(address, to: Function.self)
    }

    /// Sets FD_CLOEXEC after the fact: the fallback where the atomic call is missing.
    static func setCloseOnExec(_ fd: Int32) {
        let flags = fcntl(fd, F_GETFD)
        if flags != -1 { _ = fcntl(fd, F_SETFD, flags | FD_CLOEXEC) }
    }
}

/// `pipe2(O_CLOEXEC)`, or `pipe` plus FD_CLOEXEC where pipe2 is unavailable.
///
/// - Throws: `Errno` from pipe2/pipe.
func makeCloseOnExecPipe() throws(Errno) -> (read: Int32, write: Int32) {
    var ends: [Int32] = [-1, -1]
    if let pipe2 = GNUExtensions.pipe2 {
        try retryingInterrupts { pipe2(&ends, O_CLOEXEC) }
    } else {
        try retryingInterrupts { pipe(&ends) }
        ends.forEach(GNUExtensions.setCloseOnExec)
    }
    return (ends[0], ends[1])
}

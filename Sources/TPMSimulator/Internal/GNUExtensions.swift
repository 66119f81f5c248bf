// Swift's Glibc module is imported without _GNU_SOURCE, so the atomic close-on-exec calls
// (accept4; pipe2 is SystemCalls' makeCloseOnExecPipe) are invisible to Swift even though libc exports them. They are resolved at
// run time instead; without them a descriptor could leak into a child spawned concurrently by
// another thread.

import SystemCalls

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

enum GNUExtensions {
    typealias Accept4 =
        @convention(c) (Int32, UnsafeMutablePointer<sockaddr>?, UnsafeMutablePointer<socklen_t>?, Int32) -> Int32

    // C function pointers from libc are immutable and callable from any thread.
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

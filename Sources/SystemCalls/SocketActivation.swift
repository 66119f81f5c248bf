#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The listening socket a service manager handed this process (systemd's socket activation,
/// sd_listen_fds(3)): descriptor 3 when `LISTEN_PID` is this process and `LISTEN_FDS` is 1, else
/// nil. The variables are removed either way, so that no child (a prompt command) mistakes the
/// socket for its own; the descriptor is made close-on-exec for the same reason.
///
/// Only a Unix stream socket that listens is taken; anything else is left alone (nil).
package func activatedListeningSocket() -> Int32? {
    defer {
        unsetenv("LISTEN_PID")
        unsetenv("LISTEN_FDS")
        unsetenv("LISTEN_FDNAMES")
    }
    guard let pid = getenv("LISTEN_PID").flatMap({ Int32(String(cString: $0)) }), pid == getpid(),
        let count = getenv("LISTEN_FDS").flatMap({ Int(String(cString: $0)) }), count == 1
    else { return nil }
    let descriptor: Int32 = 3 // SD_LISTEN_FDS_START
    var domain: Int32 = 0
    var listening: Int32 = 0
    var type: Int32 = 0
    var length = socklen_t(MemoryLayout<Int32>.size)
    guard getsockopt(descriptor, SOL_SOCKET, SO_DOMAIN, &domain, &length) == 0, domain == AF_UNIX,
        getsockopt(descriptor, SOL_SOCKET, SO_TYPE, &type, &length) == 0, type == Int32(SOCK_STREAM.rawValue),
        getsockopt(descriptor, SOL_SOCKET, SO_ACCEPTCONN, &listening, &length) == 0, listening == 1
    else { return nil }
    _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC)
    return descriptor
}

/// The path a Unix socket is bound to, or nil for an unnamed or abstract one.
package func boundPath(ofUnixSocket descriptor: Int32) -> String? {
    var address = sockaddr_un()
    var length = socklen_t(MemoryLayout<sockaddr_un>.size)
    let named = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) == 0 }
    }
    guard named, address.sun_family == sa_family_t(AF_UNIX) else { return nil }
    return withUnsafeBytes(of: &address.sun_path) { bytes -> String? in
        let path = bytes.prefix(while: { $0 != 0 })
        guard !path.isEmpty else { return nil }
        return String(decoding: path, as: UTF8.self)
    }
}

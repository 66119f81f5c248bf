#if canImport(Glibc)
import Glibc
#endif

/// The process at the other end of a connected Unix socket, as the kernel recorded it when the
/// peer connected (SO_PEERCRED): nil when `socket` is not such a socket.
package func peerCredentials(of socket: Int32) -> (pid: Int32, uid: UInt32)? {
    // struct ucred (pid, uid, gid), which Glibc's module does not export without _GNU_SOURCE.
    var credentials: [Int32] = [0, 0, 0]
    var length = socklen_t(MemoryLayout<Int32>.size * 3)
    guard getsockopt(socket, SOL_SOCKET, SO_PEERCRED, &credentials, &length) == 0 else { return nil }
    return (credentials[0], UInt32(bitPattern: credentials[1]))
}

/// The executable of process `pid` (this process when nil), from /proc; nil when it cannot be read.
package func executablePath(ofProcess pid: Int32? = nil) -> String? {
    var target = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
    let length = readlink(pid.map { "/proc/\($0)/exe" } ?? "/proc/self/exe", &target, target.count - 1)
    guard length > 0 else { return nil }
    return String(decoding: target[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

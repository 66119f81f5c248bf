#if canImport(Glibc)
import Glibc
#endif

/// Why ``connectToOwnedSocket(_:owner:timeoutSeconds:)`` made no connection.
package enum OwnedSocketFailure: Error, Equatable, Sendable {
    /// Nothing is at the path.
    case absent
    /// The path could not be checked (the reason, from errno).
    case unchecked(String)
    /// Something is there, but not a socket of the expected owner's.
    case foreignSocket
    /// Nobody listens (the reason, from errno).
    case refused(String)
    /// The process that accepted is not the expected owner's.
    case foreignPeer
}

/// A connection to the Unix socket at `path` whose file and listening process both belong to
/// `owner`, checked before and after connecting (SO_PEERCRED): an answer from a socket anyone
/// else could have made is never trusted. Reads and writes time out after `timeoutSeconds`, so a
/// server that hangs costs its caller that much at most. The caller closes it.
package func connectToOwnedSocket(
    _ path: String, owner: UInt32, timeoutSeconds: Int
) throws(OwnedSocketFailure) -> Int32 {
    var status = stat()
    guard lstat(path, &status) == 0 else {
        if errno == ENOENT || errno == ENOTDIR { throw .absent }
        throw .unchecked("\(Errno.current)")
    }
    guard status.st_mode & S_IFMT == S_IFSOCK, status.st_uid == owner else { throw .foreignSocket }
    let connection = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard connection >= 0 else { throw .refused("socket: \(Errno.current)") }
    setSocketTimeouts(connection, seconds: timeoutSeconds)
    guard withUnixSocketAddress(path, { Glibc.connect(connection, $0, $1) }) == 0 else {
        let reason = "\(Errno.current)"
        close(connection)
        throw .refused(reason)
    }
    guard let peer = peerCredentials(of: connection), peer.uid == owner else {
        close(connection)
        throw .foreignPeer
    }
    return connection
}

/// Makes each read and each write on `connection` fail (EAGAIN) after waiting `seconds`.
package func setSocketTimeouts(_ connection: Int32, seconds: Int) {
    var timeout = timeval(tv_sec: seconds, tv_usec: 0)
    _ = setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    _ = setsockopt(connection, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
}

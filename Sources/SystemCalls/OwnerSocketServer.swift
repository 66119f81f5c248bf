#if canImport(Glibc)
import Glibc
#endif

/// A Unix socket server for this user's own processes: the ssh agent's and the session holder's.
/// Each connection is answered on a thread of its own, up to ``connectionLimit`` at once; its
/// peer (SO_PEERCRED) must be this process's user, root included, or it is closed unanswered
/// (``refusal``). A socket this server makes is 0600 from its bind on; one a service manager
/// hands over (systemd socket activation) has the mode its unit gives, and the same check.
package final class OwnerSocketServer: Sendable {
    package let socketPath: String
    private let listener: Int32
    /// Whether the server made the socket (and removes it at ``stop()``), rather than a service manager.
    private let ownsSocket: Bool
    package let ownerUID: UInt32 = geteuid()
    package let connectionLimit: Int
    /// How long one read or write of a connection may wait, nil for no limit: a server whose
    /// clients ask at once and hang up (the session holder) does not let a silent or stopped
    /// client keep one of its ``connectionLimit`` places.
    private let waitLimitSeconds: Int?
    private let connections = Locked<Int>(0)
    private let stopped = Locked<Bool>(false)
    /// What the server is, as its refusals name it ("agent").
    private let name: String
    private let log: @Sendable (String) -> Void

    /// Listens on `socketPath` (a stale socket there of this user's is replaced).
    ///
    /// - Throws: ``OwnerSocketServerError`` when the socket cannot be made.
    package init(
        socketPath: String, name: String, connectionLimit: Int, waitLimitSeconds: Int? = nil,
        log: @escaping @Sendable (String) -> Void
    ) throws(OwnerSocketServerError) {
        self.socketPath = socketPath
        self.name = name
        self.connectionLimit = connectionLimit
        self.waitLimitSeconds = waitLimitSeconds
        self.log = log
        var status = stat()
        if lstat(socketPath, &status) == 0 {
            guard status.st_mode & S_IFMT == S_IFSOCK, status.st_uid == geteuid() else {
                throw OwnerSocketServerError(
                    "\(socketPath) exists and is not a socket of this user: remove it or choose another path")
            }
            unlink(socketPath)
        }
        let listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard listener >= 0 else {
            throw OwnerSocketServerError("Cannot make a socket: \(String(cString: strerror(errno)))")
        }
        // The socket is made 0600 by bind itself: no moment exists where another user may connect.
        let previous = umask(0o177)
        let bound = withUnixSocketAddress(socketPath) { Glibc.bind(listener, $0, $1) }
        umask(previous)
        guard bound == 0, Glibc.listen(listener, 64) == 0 else {
            let reason = String(cString: strerror(errno))
            close(listener)
            throw OwnerSocketServerError("Cannot listen on \(socketPath): \(reason)")
        }
        self.listener = listener
        ownsSocket = true
    }

    /// Serves `descriptor`, a listening Unix socket a service manager made and handed over.
    package init(
        listeningOn descriptor: Int32, name: String, connectionLimit: Int, waitLimitSeconds: Int? = nil,
        log: @escaping @Sendable (String) -> Void
    ) {
        socketPath = boundPath(ofUnixSocket: descriptor) ?? "the socket handed over"
        self.name = name
        self.connectionLimit = connectionLimit
        self.waitLimitSeconds = waitLimitSeconds
        self.log = log
        listener = descriptor
        ownsSocket = false
    }

    /// Accepts connections until ``stop()``, calling `answer` on a new thread with each one whose
    /// peer is this user; the connection is closed when `answer` returns.
    package func serve(_ answer: @escaping @Sendable (_ connection: Int32, _ pid: Int32, _ uid: UInt32) -> Void) {
        while !stopped.withLock({ $0 }) {
            // accept4 is not in Glibc's module (it needs _GNU_SOURCE); the servers start no
            // child, so no descriptor can leak between accept and FD_CLOEXEC.
            let connection = accept(listener, nil, nil)
            if connection >= 0 { _ = fcntl(connection, F_SETFD, FD_CLOEXEC) }
            if connection < 0 {
                if errno == EINTR || errno == ECONNABORTED { continue }
                if stopped.withLock({ $0 }) { return }
                log("accept failed: \(String(cString: strerror(errno)))")
                return
            }
            let admitted = connections.withLock { count -> Bool in
                guard count < connectionLimit else { return false }
                count += 1
                return true
            }
            guard admitted else {
                log("refused a connection: \(connectionLimit) clients are connected already")
                close(connection)
                continue
            }
            // Detached: nobody joins a connection's thread, and a joinable one nobody joins keeps
            // its stack mapped after it ends, one stack per connection ever answered. A detached
            // thread's stack goes back to glibc's cache, so the next connection's thread reuses it.
            do {
                try DetachedThread.start { [self] in
                    defer { connections.withLock { $0 -= 1 } }
                    defer { close(connection) }
                    guard let peer = peerCredentials(of: connection) else { return }
                    guard peer.uid == ownerUID else {
                        log("refused uid \(peer.uid) (pid \(peer.pid)): this \(name) serves uid \(ownerUID) only")
                        return
                    }
                    if let waitLimitSeconds { setSocketTimeouts(connection, seconds: waitLimitSeconds) }
                    answer(connection, peer.pid, peer.uid)
                }
            } catch {
                connections.withLock { $0 -= 1 }
                close(connection)
            }
        }
    }

    /// Stops accepting (connections being answered finish their current message) and removes the socket.
    package func stop() {
        // Gone before the serving thread wakes: a process that then ends has removed it.
        // A service manager's socket stays: it listens again for the next start.
        if ownsSocket { unlink(socketPath) }
        stopped.withLock { $0 = true }
        shutdown(listener, Int32(SHUT_RDWR))
    }

    // MARK: Messages

    /// One message framed as OpenSSH's agent frames them (and the session holder too): a
    /// big-endian UINT32 length, then that many bytes; nil at the end of the stream, for a
    /// length of 0 or over `maximumLength`, or a message cut short.
    package static func readMessage(_ connection: Int32, maximumLength: Int) -> [UInt8]? {
        guard let prefix = readExactly(connection, 4) else { return nil }
        let length = Int(UInt32(prefix[0]) << 24 | UInt32(prefix[1]) << 16 | UInt32(prefix[2]) << 8 | UInt32(prefix[3]))
        guard length > 0, length <= maximumLength else { return nil }
        return readExactly(connection, length)
    }

    /// `body` with its length in front, as ``readMessage(_:maximumLength:)`` reads it.
    package static func framed(_ body: [UInt8]) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(body.count + 4)
        let length = UInt32(body.count)
        bytes += [UInt8(length >> 24), UInt8(length >> 16 & 0xff), UInt8(length >> 8 & 0xff), UInt8(length & 0xff)]
        bytes += body
        return bytes
    }

    private static func readExactly(_ connection: Int32, _ count: Int) -> [UInt8]? {
        var bytes = [UInt8](repeating: 0, count: count)
        var filled = 0
        while filled < count {
            let read = bytes.withUnsafeMutableBytes { Glibc.read(connection, $0.baseAddress! + filled, count - filled) }
            if read < 0, errno == EINTR { continue }
            guard read > 0 else { return nil }
            filled += read
        }
        return bytes
    }
}

package struct OwnerSocketServerError: Error, CustomStringConvertible {
    package let description: String
    package init(_ description: String) { self.description = description }
}

// Blocking IPv4 loopback sockets: enough for swtpm's TCP command and control channels and for the
// recording proxy in TPMKeychainTesting (hence `package` access). Every descriptor is created
// with SOCK_CLOEXEC so that children spawned concurrently by other threads never inherit it.

import FoundationEssentials
package import SystemCalls

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

package enum LoopbackSocket {
    /// Binds two listening sockets on consecutive free loopback ports P and P+1.
    ///
    /// The swtpm TCTI derives the control port as command port + 1, so a pair is needed.
    /// The kernel picks P (port 0); P+1 is merely tried, so a bounded number of attempts is made.
    ///
    /// - Throws: `Errno` if no pair could be bound.
    package static func listenOnConsecutivePorts(
        host: String = "127.0.0.1",
        attempts: Int = 64
    ) throws(Errno) -> (port: Int, first: Int32, second: Int32) {
        var lastError = Errno(rawValue: EADDRINUSE)
        let candidates = candidatePorts()
        for _ in 0..<attempts {
            let first = try makeSocket()
            do throws(Errno) {
                let port = Int.random(in: candidates)
                try bindSocket(first, host: host, port: port)
                let second = try makeSocket()
                do throws(Errno) {
                    try bindSocket(second, host: host, port: port + 1)
                    try retryingInterrupts { listen(first, 16) }
                    try retryingInterrupts { listen(second, 16) }
                    return (port, first, second)
                } catch {
                    closeDescriptor(second)
                    throw error
                }
            } catch {
                closeDescriptor(first)
                if error.rawValue != EADDRINUSE { throw error }
                lastError = error
            }
        }
        throw lastError
    }

    /// Finds two consecutive free loopback ports and releases them for a child to bind.
    ///
    /// - Important: another process may take a port between release and the child's bind;
    ///   callers must detect that and retry.
    /// - Throws: `Errno` if no pair could be found.
    package static func reserveConsecutivePorts() throws(Errno) -> Int {
        let pair = try listenOnConsecutivePorts()
        closeDescriptor(pair.first)
        closeDescriptor(pair.second)
        return pair.port
    }

    /// Connects a blocking TCP socket. With a timeout, sends and receives on it fail with
    /// ETIMEDOUT instead of blocking forever (swtpm serves one command client at a time, so a
    /// client that holds the connection would otherwise stall us indefinitely).
    ///
    /// - Throws: `Errno` from socket/connect (ECONNREFUSED while nothing listens yet).
    package static func connectTCP(host: String, port: Int, timeout: Duration?) throws(Errno) -> Int32 {
        let fd = try makeSocket()
        do throws(Errno) {
            if let timeout { try setTimeouts(fd, timeout) }
            var address = try socketAddress(host: host, port: port)
            let length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let result = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, length) }
            }
            if result == -1 {
                let error = errno
                // An interrupted connect continues asynchronously; waiting for it is not worth
                // the complexity here, callers retry on failure anyway.
                throw Errno(rawValue: error)
            }
            return fd
        } catch {
            closeDescriptor(fd)
            throw error
        }
    }

    /// Connects a blocking Unix stream socket to `path`, with send and receive timeouts as
    /// ``connectTCP(host:port:timeout:)``.
    ///
    /// - Throws: `Errno` (ENOENT or ECONNREFUSED while nothing listens yet, ENAMETOOLONG).
    package static func connectUnix(path: String, timeout: Duration?) throws(Errno) -> Int32 {
        let fd = try retryingInterrupts { socket(AF_UNIX, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0) }
        do throws(Errno) {
            if let timeout { try setTimeouts(fd, timeout) }
            if withUnixSocketAddress(path, { Glibc.connect(fd, $0, $1) }) == -1 { throw Errno.current }
            return fd
        } catch {
            closeDescriptor(fd)
            throw error
        }
    }

    /// Accepts one connection (CLOEXEC). Fails with EINVAL once the listener was shut down.
    ///
    /// - Throws: `Errno` from accept4.
    package static func acceptConnection(_ listener: Int32) throws(Errno) -> Int32 {
        if let accept4 = GNUExtensions.accept4 {
            return try retryingInterrupts { accept4(listener, nil, nil, Int32(SOCK_CLOEXEC.rawValue)) }
        }
        let fd = try retryingInterrupts { accept(listener, nil, nil) }
        GNUExtensions.setCloseOnExec(fd)
        return fd
    }

    /// Writes all of `bytes`. MSG_NOSIGNAL turns a peer that went away into EPIPE rather than a
    /// process-killing SIGPIPE.
    ///
    /// - Throws: `Errno` (ETIMEDOUT when the socket's send timeout expires).
    package static func sendAll(_ fd: Int32, _ bytes: some Collection<UInt8>) throws(Errno) {
        let array = Array(bytes)
        var offset = 0
        while offset < array.count {
            // withUnsafeBytes rethrows untyped errors, so the typed error travels in a Result.
            let sent: Result<Int, Errno> = array.withUnsafeBytes { buffer in
                Result { () throws(Errno) in
                    // The loop only runs for a non-empty array, whose buffer always has an address.
                    guard let base = buffer.baseAddress else { return buffer.count }
                    return try retryingInterrupts {
                        send(fd, base + offset, buffer.count - offset, Int32(MSG_NOSIGNAL))
                    }
                }
            }
            offset += try sent.get()
        }
    }

    /// Reads up to `maximum` bytes; an empty result means the peer closed the stream.
    ///
    /// - Throws: `Errno` (ETIMEDOUT when the socket's receive timeout expires).
    package static func receive(_ fd: Int32, maximum: Int) throws(Errno) -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: maximum)
        let received: Result<Int, Errno> = buffer.withUnsafeMutableBytes { raw in
            Result { () throws(Errno) in try retryingInterrupts { recv(fd, raw.baseAddress, raw.count, 0) } }
        }
        let count: Int
        do throws(Errno) {
            count = try received.get()
        } catch  where error.rawValue == EAGAIN || error.rawValue == EWOULDBLOCK {
            // SO_RCVTIMEO expiry: report it as what it means.
            throw Errno(rawValue: ETIMEDOUT)
        }
        buffer.removeSubrange(count...)
        return buffer
    }

    /// Reads exactly `count` bytes.
    ///
    /// - Throws: `Errno`; ECONNRESET when the peer closes before `count` bytes arrived.
    package static func receiveExactly(_ fd: Int32, count: Int) throws(Errno) -> [UInt8] {
        var result: [UInt8] = []
        result.reserveCapacity(count)
        while result.count < count {
            let chunk = try receive(fd, maximum: count - result.count)
            if chunk.isEmpty { throw Errno(rawValue: ECONNRESET) }
            result += chunk
        }
        return result
    }

    /// Wakes every thread blocked in accept/recv/send on `fd`; the descriptor stays open so it
    /// cannot be reused while those threads still refer to it.
    package static func shutdownBoth(_ fd: Int32) {
        _ = shutdown(fd, Int32(SHUT_RDWR))
    }

    // MARK: - Helpers

    /// Where to look for a free pair: below the kernel's ephemeral range, because every TPM command
    /// through the tss2 swtpm TCTI is its own TCP connection and a busy run can leave the whole
    /// ephemeral range in client-side TIME_WAIT, where even bind(port 0) finds nothing.
    private static func candidatePorts() -> ClosedRange<Int> {
        var low = 32768
        if let text = try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8),
            let first = text.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" }).first,
            let value = Int(first)
        {
            low = value
        }
        return low > 12_000 ? 10_000...(low - 2) : 61_000...65_533
    }

    /// A listening-socket candidate with SO_REUSEADDR, as servers (swtpm included) bind theirs:
    /// every TPM command through the tss2 swtpm TCTI is its own TCP connection, so a busy test run
    /// leaves thousands of loopback ports in TIME_WAIT, which would otherwise refuse the bind.
    private static func makeSocket() throws(Errno) -> Int32 {
        let descriptor = try retryingInterrupts {
            socket(AF_INET, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
        }
        var enable: Int32 = 1
        do {
            try retryingInterrupts {
                setsockopt(descriptor, SOL_SOCKET, SO_REUSEADDR, &enable, socklen_t(MemoryLayout<Int32>.size))
            }
        } catch {
            closeDescriptor(descriptor)
            throw error
        }
        return descriptor
    }

    private static func socketAddress(host: String, port: Int) throws(Errno) -> sockaddr_in {
        guard (0...65535).contains(port) else { throw Errno(rawValue: EINVAL) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        guard inet_pton(AF_INET, host, &address.sin_addr) == 1 else { throw Errno(rawValue: EINVAL) }
        return address
    }

    private static func bindSocket(_ fd: Int32, host: String, port: Int) throws(Errno) {
        var address = try socketAddress(host: host, port: port)
        let length = socklen_t(MemoryLayout<sockaddr_in>.size)
        try retryingInterrupts {
            withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
            }
        }
    }

    private static func setTimeouts(_ fd: Int32, _ timeout: Duration) throws(Errno) {
        let (seconds, attoseconds) = timeout.components
        var value = timeval(tv_sec: Int(seconds), tv_usec: Int(attoseconds / 1_000_000_000_000))
        if value.tv_sec == 0 && value.tv_usec == 0 { value.tv_usec = 1 } // 0 would mean "forever"
        let length = socklen_t(MemoryLayout<timeval>.size)
        try retryingInterrupts { setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &value, length) }
        try retryingInterrupts { setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &value, length) }
    }
}

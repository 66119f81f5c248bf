import SystemCalls

#if canImport(Glibc)
import Glibc
#endif

/// Bounds how long a TPM round trip may block.
///
/// tpm2-tss cannot do it for us: the synchronous ESAPI calls retry TSS2_TCTI_RC_TRY_AGAIN
/// forever, and its socket I/O retries EINTR. So when a deadline passes, the sockets this process
/// holds to the TPM's endpoint are shut down (shutdown(2), not close: the TCTI still owns the
/// descriptors). The blocked read then sees end-of-file, the TCTI reports an I/O error, ESAPI
/// returns it, and the caller turns it into `.timedOut`. A stopped or hung swtpm thus costs one
/// timeout, not a process that never ends.
struct CommandDeadline {
    let endpoint: TCTIEndpoint?
    let timeout: Duration
    let tcti: String

    init(_ configuration: TPMConfiguration) {
        endpoint = TCTIEndpoint(tcti: configuration.tcti)
        timeout = configuration.timeout
        tcti = configuration.tcti
    }

    /// Runs `body`; if the deadline passed while it ran, its error becomes `.timedOut`.
    ///
    /// - Throws: what `body` throws, or ``TPMError`` `.timedOut`.
    func guarding<R>(_ what: String, _ body: () throws -> R) throws -> R {
        let alarm = arm()
        defer { alarm?.disarm() }
        do {
            return try body()
        } catch {
            throw alarm?.translate(error, while: what) ?? error
        }
    }

    /// Starts the clock for one stretch of TPM work; nil when the TCTI is not a socket. For
    /// callers whose work cannot be a closure (it touches state a closure may not capture).
    func arm() -> Alarm? {
        guard let endpoint else { return nil }
        let alarm = Alarm(tcti: tcti, timeout: timeout)
        alarm.token = DeadlineWatchdog.shared.schedule(after: timeout) { alarm.fire { endpoint.disconnectSockets() } }
        return alarm
    }

    /// The alarm's state: once disarmed it can no longer fire, and firing finishes before
    /// disarming returns, so a late alarm never cuts a later command's connection.
    final class Alarm: @unchecked Sendable {
        private enum State { case armed, fired, disarmed }
        private let state = Locked(State.armed)
        private let tcti: String
        private let timeout: Duration
        /// Set once, as the alarm is scheduled; read only by ``disarm()``.
        fileprivate var token: UInt64?

        fileprivate init(tcti: String, timeout: Duration) {
            self.tcti = tcti
            self.timeout = timeout
        }

        /// `error` as the caller should see it: `.timedOut` when the alarm cut the connection.
        func translate(_ error: any Error, while what: String) -> any Error {
            guard hasFired else { return error }
            return TPMError(
                .timedOut,
                "The TPM at \(tcti) did not answer within \(timeout) while \(what); it may be stopped or hung. Set \(TPMConfiguration.timeoutVariable) (seconds) to wait longer",
                operation: what)
        }

        fileprivate func fire(_ action: () -> Void) {
            state.withLock { state in
                guard state == .armed else { return }
                state = .fired
                action()
            }
        }

        func disarm() {
            if let token { DeadlineWatchdog.shared.cancel(token) }
            state.withLock { state in
                if state == .armed { state = .disarmed }
            }
        }

        var hasFired: Bool { state.withLock { $0 == .fired } }
    }
}

/// Where a socket TCTI connects: swtpm's or mssim's `path=` (a Unix socket) or `port=` (TCP).
enum TCTIEndpoint: Sendable, Hashable {
    case unixSocket(path: String)
    case tcp(port: UInt16)

    /// Nil for TCTIs that are not sockets (device, tabrmd, libtpms).
    init?(tcti: String) {
        let parts = tcti.split(separator: ":", maxSplits: 1)
        guard let name = parts.first, name == "swtpm" || name == "mssim" else { return nil }
        var options: [Substring: Substring] = [:]
        for pair in (parts.count > 1 ? parts[1] : "").split(separator: ",") {
            let keyValue = pair.split(separator: "=", maxSplits: 1)
            if keyValue.count == 2 { options[keyValue[0]] = keyValue[1] }
        }
        if let path = options["path"] {
            self = .unixSocket(path: String(path))
        } else {
            // tpm2-tss's default for both TCTIs.
            guard let port = UInt16(options["port"] ?? "2321") else { return nil }
            self = .tcp(port: port)
        }
    }

    /// Shuts down every socket of this process connected to the endpoint. Without a resource
    /// manager the TPM access lock makes this process the endpoint's only user, and every
    /// connection a TPMConnection makes is serialised, so only the stuck command's socket is hit.
    func disconnectSockets() {
        guard let directory = opendir("/proc/self/fd") else { return }
        defer { closedir(directory) }
        let listing = dirfd(directory)
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            guard let descriptor = Int32(name), descriptor != listing else { continue }
            var status = stat()
            guard fstat(descriptor, &status) == 0, status.st_mode & S_IFMT == S_IFSOCK, isConnected(descriptor) else {
                continue
            }
            _ = shutdown(descriptor, Int32(SHUT_RDWR))
        }
    }

    private func isConnected(_ descriptor: Int32) -> Bool {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let got = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(descriptor, $0, &length) }
        }
        guard got == 0 else { return false }
        switch self {
        // The command channel, or swtpm's control channel (port + 1, or path + ".ctrl"), which
        // the TCTI already talks to while it initialises.
        case .tcp(let port):
            let family = Int32(storage.ss_family)
            let peerPort: UInt16
            if family == AF_INET {
                peerPort = UInt16(bigEndian: withUnsafeBytes(of: &storage) { $0.load(as: sockaddr_in.self).sin_port })
            } else if family == AF_INET6 {
                peerPort = UInt16(bigEndian: withUnsafeBytes(of: &storage) { $0.load(as: sockaddr_in6.self).sin6_port })
            } else {
                return false
            }
            return peerPort == port || peerPort == port &+ 1
        case .unixSocket(let path):
            guard Int32(storage.ss_family) == AF_UNIX else { return false }
            let peer = withUnsafeBytes(of: &storage) { raw -> String in
                let pathBytes = raw.dropFirst(MemoryLayout<sa_family_t>.size)
                return String(decoding: pathBytes.prefix { $0 != 0 }, as: UTF8.self)
            }
            return peer == path || peer == path + ".ctrl"
        }
    }
}

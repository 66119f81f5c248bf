package import SystemCalls
import TPMKeychain

#if canImport(Glibc)
import Glibc
#endif

/// The authenticator on a Unix socket carrying CTAPHID reports: each 64-byte report as is, in
/// both directions, so that a FIDO client reads the socket as it reads a HID device. Only the
/// socket's owner is served (OwnerSocketServer: a 0600 socket and each peer's uid checked). Each
/// connection is a device of its own to the client: its own channels and framing, one command at
/// a time for the whole authenticator.
package final class AuthenticatorServer: Sendable {
    private let server: OwnerSocketServer
    private let authenticator: PasskeyAuthenticator
    private let log: @Sendable (String) -> Void

    /// How many clients are served at once; more are closed at once.
    package static let connectionLimit = 16
    package var socketPath: String { server.socketPath }

    package init(
        socketPath: String, authenticator: PasskeyAuthenticator, log: @escaping @Sendable (String) -> Void
    ) throws(OwnerSocketServerError) {
        server = try OwnerSocketServer(
            socketPath: socketPath, name: "authenticator", connectionLimit: Self.connectionLimit, log: log)
        self.authenticator = authenticator
        self.log = log
    }

    package func serve() {
        server.serve { [self] connection, pid, uid in answer(connection, pid: pid, uid: uid) }
    }

    package func stop() {
        server.stop()
    }

    private func answer(_ connection: Int32, pid: Int32, uid: UInt32) {
        let peer = AccessCaller.peer(of: connection, pid: pid, uid: uid, face: .authenticator)
        let requester = PasskeyAuthenticator.Requester(
            caller: peer.caller,
            description: AccessCaller.describe(executable: peer.caller.executable, identity: peer.identity, pid: pid))
        var transport = SocketReports(connection: connection)
        CTAPHIDSession.run(&transport, authenticator: authenticator, requester: requester)
    }
}

/// Reports on a Unix stream socket, 64 bytes each way, as a HID device node carries them.
private struct SocketReports: CTAPHIDTransport {
    let connection: Int32

    mutating func send(_ reports: [[UInt8]]) -> Bool {
        for report in reports {
            let written = report.withUnsafeBytes { (try? writeAllToPeer(connection, $0, timeout: 5_000)) != nil }
            guard written else { return false }
        }
        return true
    }

    /// One 64-byte report; `timeout` milliseconds for its first byte (-1: no limit).
    mutating func readReport(timeout: Int32) -> CTAPHIDReadOutcome {
        var report = [UInt8](repeating: 0, count: CTAPHIDChannels.reportSize)
        var filled = 0
        while filled < report.count {
            var poller = pollfd(fd: connection, events: Int16(POLLIN), revents: 0)
            let ready = poll(&poller, 1, filled == 0 ? timeout : 5_000)
            if ready < 0, errno == EINTR { continue }
            if ready == 0 { return filled == 0 ? .timedOut : .closed }
            guard ready > 0 else { return .closed }
            let count = report.withUnsafeMutableBytes { read(connection, $0.baseAddress! + filled, $0.count - filled) }
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { return .closed }
            filled += count
        }
        return .report(report)
    }
}

import ArgumentParser
import CommandLineSupport
import SystemCalls
import TPMKeychain
import TPMKeychainFprintd
import ToolSupport

#if canImport(Glibc)
import Glibc
#endif

/// `hold-session`: the session holder, the warm path's server (docs/ARCHITECTURE.md, "The warm
/// path"). Run it as a systemd user service (its socket unit starts it on the first lookup).
struct HoldSession: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "hold-session",
        abstract: "Keep the user's stores open for the login session, so that lookups need no TPM command.",
        discussion: """
            Lookups of this user's programs (tpm-keychain, git-credential-tpm-keychain, SecItem and \
            the Keychain API) ask it first: it answers reads of items under the master key from \
            stores it keeps open, and the program opens the store itself for anything else. It \
            serves only this user, never hands out a key, and erases every key it holds when the \
            keychain is locked, when the session's screen locks or the machine is about to \
            suspend (logind), and when it stops (logout stops its unit); while the screen is \
            locked it holds nothing. The socket is \
            $TPM_KEYCHAIN_SESSION_HOLDER, else $XDG_RUNTIME_DIR/tpm-keychain/session.socket.

            \(ExitStatus.helpText)
            """)

    @Option(help: ArgumentHelp("The socket's path; default as above.", valueName: "path"))
    var socket: String?

    /// logind's bus and session, for tests (python-dbusmock's logind on a private bus).
    @Option(help: .hidden) var logindAddress: String?
    @Option(help: .hidden) var logindSession: String?

    func run() throws {
        try reportingErrors {
            let log: @Sendable (String) -> Void = { writeStandardError("tpm-keychain hold-session: " + $0 + "\n") }
            let server: SessionHolderServer
            // Started by its socket unit (tpm-keychain-session.socket), the holder serves that socket.
            if let activated = activatedListeningSocket() {
                server = SessionHolderServer(listeningOn: activated, log: log)
            } else {
                let path = try socketPath()
                do throws(OwnerSocketServerError) {
                    server = try SessionHolderServer(socketPath: path, log: log)
                } catch {
                    throw CommandFailure(ExitStatus.ioError, error.description)
                }
            }
            let following = followSession(server, log: log)
            defer { following?.stop() }
            log("serving \(server.socketPath)")
            // A unit's stop (SIGTERM) erases the keys held, removes the socket, and the holder
            // dies of the signal.
            ProcessGuard.serveUntilInterrupted(stop: { server.stop() }) { server.serve() }
        }
    }

    /// Erases what the holder holds each time the session's screen locks or the machine is about
    /// to suspend (logind), on a thread of its own, so that serving never waits for logind.
    private func followSession(
        _ server: SessionHolderServer, log: @escaping @Sendable (String) -> Void
    )
        -> SessionFollowing?
    {
        do {
            return try SessionFollowing(
                busAddress: logindAddress, session: logindSession, server: server, log: log)
        } catch {
            log("not following the session's screen lock and suspend: \(error)")
            return nil
        }
    }

    /// `--socket`, `TPM_KEYCHAIN_SESSION_HOLDER`, or the runtime directory's (made 0700 when missing).
    private func socketPath() throws -> String {
        if let socket { return socket }
        if let chosen = SessionHolder.socketPath, getenv(SessionHolder.socketVariable) != nil { return chosen }
        return try RuntimeSockets.directory(option: "--socket") + "/session.socket"
    }
}

/// The holder's watch on logind: a suspend erases every key held on logind's signal, while a
/// delay inhibitor makes the suspend wait for it; a lock of the screen erases them too, and while
/// the screen is locked, or logind cannot say whether it is (it left the bus, the session ended,
/// the bus failed), reads are answered cold, so nothing is held again meanwhile. The screen's
/// state is read from the session lock's cache (memory only, no bus traffic) five times a second,
/// for as long as the holder runs: logind back on the bus is followed again. Where there is no
/// session to follow (no system bus, no login yet, the session ended), it says so and looks
/// again every 5 seconds.
final class SessionFollowing: Sendable {
    private let lock = Locked<LogindSessionLock?>(nil)
    private let stopped = Locked(false)
    private let thread: Locked<JoinableThread?> = Locked(nil)

    init(
        busAddress: String?, session: String?, server: SessionHolderServer,
        log: @escaping @Sendable (String) -> Void
    ) throws {
        let started = try JoinableThread { [lock, stopped] in
            var reported = false
            // Why reads are held back now (the holder was told); nil when they are served.
            var heldBack: String?
            while !stopped.withLock({ $0 }) {
                let following: LogindSessionLock
                do {
                    // The suspend is erased for on logind's signal, with the suspend waiting for it.
                    following = try LogindSessionLock(busAddress: busAddress, session: session) { starting in
                        server.sleeping(starting)
                    }
                } catch {
                    // No session yet (a lookup from ssh or a timer started the holder, before
                    // any login), or none since the last one ended: looked for again.
                    if !reported { log("not following the session's screen lock and suspend yet: \(error)") }
                    reported = true
                    Self.wait(Self.retryInterval, unless: stopped)
                    continue
                }
                reported = false
                lock.withLock { $0 = following }
                if stopped.withLock({ $0 }) { return following.stop() }
                log("following the screen lock and suspend of \(following.sessionPath)")
                Self.follow(following, server: server, stopped: stopped, heldBack: &heldBack)
                lock.withLock { $0 = nil }
                following.stop()
                // A wake the lost lock did not hear: the next one follows suspends afresh.
                server.sleeping(false)
            }
        }
        thread.withLock { $0 = started }
    }

    /// How often a session to follow is looked for while there is none.
    static let retryInterval = Duration.seconds(5)

    /// Follows `following` until the holder stops or the lock can no longer say anything again
    /// (its session ended, its connection failed): then a new one is looked for, and reads stay
    /// held back (`heldBack`, what the holder was last told) until it knows the state.
    private static func follow(
        _ following: LogindSessionLock, server: SessionHolderServer, stopped: Locked<Bool>, heldBack: inout String?
    ) {
        var seen: UInt64?
        while !stopped.withLock({ $0 }) {
            // Why reads wait now; nil when they may be served.
            let holdingBack: String?
            var lost = false
            do {
                // A count, not only the state: a lock undone between two looks still erases.
                let locks = try following.timesLocked() ?? 0
                if let seen, locks > seen { server.eraseHeldKeys(because: "the session's screen locked") }
                seen = locks
                holdingBack = try following.isLocked() ? "the session's screen is locked" : nil
            } catch {
                holdingBack = "logind can no longer say whether the session is locked (\(error))"
                lost = error.code == .noSession || error.code == .connectionLost
            }
            if (holdingBack == nil) != (heldBack == nil), !stopped.withLock({ $0 }) {
                server.holdBack(holdingBack)
            }
            heldBack = holdingBack
            if lost { return }
            sleep(for: .milliseconds(200))
        }
    }

    /// Sleeps `duration`, in steps, returning early once `stopped` is set.
    private static func wait(_ duration: Duration, unless stopped: Locked<Bool>) {
        let end = ContinuousClock.now + duration
        while ContinuousClock.now < end, !stopped.withLock({ $0 }) { sleep(for: .milliseconds(100)) }
    }

    func stop() {
        stopped.withLock { $0 = true }
        lock.withLock { $0 }?.stop()
        thread.withLock { $0.take() }?.join()
    }
}

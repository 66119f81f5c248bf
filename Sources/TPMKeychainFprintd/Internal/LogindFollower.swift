// systemd-logind's LockedHint for one session, followed on one connection by LogindSessionLock's own
// thread. The interface is org.freedesktop.login1(5); see LogindSessionLock.swift for what the hint
// and the Lock/Unlock signals mean to a caller.

import DBus
import Dispatch
import SystemCalls

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// logind's names on the bus.
enum Logind {
    static let service = "org.freedesktop.login1"
    static let managerPath = "/org/freedesktop/login1"
    static let managerInterface = "org.freedesktop.login1.Manager"
    static let sessionInterface = "org.freedesktop.login1.Session"
    static let userInterface = "org.freedesktop.login1.User"
    static let propertiesInterface = "org.freedesktop.DBus.Properties"
    static let lockedHint = "LockedHint"

    /// logind's error names (src/login/logind-dbus.c, `BUS_ERROR_*` in bus-common-errors.h).
    enum ErrorName {
        static let noSuchSession = "org.freedesktop.login1.NoSuchSession"
        static let noSessionForPID = "org.freedesktop.login1.NoSessionForPID"
        static let noSuchUser = "org.freedesktop.login1.NoSuchUser"
        static let noUserForPID = "org.freedesktop.login1.NoUserForPID"
    }
}

/// What readers of ``LogindSessionLock/isLocked()`` see; written by the follower's thread.
final class LockStateCache: Sendable {
    private enum State {
        case starting
        case known(lockedHint: Bool, lockRequested: Bool, timesLocked: UInt64, timesSuspended: UInt64)
        case unknown(LogindSessionLockError)
        case stopped
    }

    private let state = Locked<State>(.starting)

    func isLocked() throws(LogindSessionLockError) -> Bool {
        try known().locked
    }

    func timesLocked() throws(LogindSessionLockError) -> UInt64 {
        try known().timesLocked
    }

    func timesSuspended() throws(LogindSessionLockError) -> UInt64 {
        try known().timesSuspended
    }

    private func known() throws(LogindSessionLockError) -> (locked: Bool, timesLocked: UInt64, timesSuspended: UInt64) {
        switch state.withLock({ $0 }) {
        case .known(let lockedHint, let lockRequested, let timesLocked, let timesSuspended):
            return (lockedHint || lockRequested, timesLocked, timesSuspended)
        case .unknown(let error):
            throw error
        case .starting:
            throw LogindSessionLockError(.logindUnavailable, "The session lock has not read LockedHint yet")
        case .stopped:
            throw LogindSessionLockError(.stopped, "The session lock was stopped")
        }
    }

    func set(lockedHint: Bool, lockRequested: Bool, timesLocked: UInt64, timesSuspended: UInt64) {
        update(
            .known(
                lockedHint: lockedHint, lockRequested: lockRequested, timesLocked: timesLocked,
                timesSuspended: timesSuspended))
    }

    func fail(_ error: LogindSessionLockError) { update(.unknown(error)) }

    /// Final: no later update replaces it.
    func stop() { state.withLock { $0 = .stopped } }

    private func update(_ new: State) {
        state.withLock { current in
            if case .stopped = current { return }
            current = new
        }
    }
}

/// The session the follower found, or why it could not start; handed from its thread to the
/// initialiser waiting for it.
final class FollowerStartup: Sendable {
    private let result = Locked<Result<String, LogindSessionLockError>?>(nil)
    private let done = DispatchSemaphore(value: 0)

    func finish(_ outcome: Result<String, LogindSessionLockError>) {
        result.withLock { $0 = outcome }
        done.signal()
    }

    func wait() -> Result<String, LogindSessionLockError> {
        done.wait()
        return result.withLock { $0 }
            ?? .failure(LogindSessionLockError(.logindUnavailable, "The session lock's thread reported nothing"))
    }
}

/// What the signals said so far; touched only by the follower's thread.
final class FollowedSession {
    let path: String
    var lockedHint = false { didSet { countLock(wasLocked: oldValue || lockRequested) } }
    /// A Lock signal not yet followed by a LockedHint notification or an Unlock signal.
    var lockRequested = false { didSet { countLock(wasLocked: lockedHint || oldValue) } }
    /// How many times the session went from unlocked to locked, signal by signal: a lock and an
    /// unlock that arrive together, between two looks of a reader, still count one.
    private(set) var timesLocked: UInt64 = 0
    /// How many times logind announced a suspend or hibernation (PrepareForSleep(true)).
    var timesSuspended: UInt64 = 0
    var logindOnBus = true
    /// logind's unique name now: only its broadcasts are followed (see ``SignalSender``).
    let logind = SignalSender(nil)
    var ended = false
    /// A notification that could not be read, an invalidated LockedHint, or logind back on the
    /// bus: read LockedHint again.
    var needsRead = false
    /// Why the last read failed.
    var readFailure: LogindSessionLockError?
    /// logind's delay inhibitor for sleep (Manager.Inhibit): logind waits for it to be closed, or
    /// for its own InhibitDelayMaxSec, before it suspends. Held only with an `aroundSleep`.
    var inhibitor: Int32?
    /// Take the inhibitor (again): at the start, after a wake, when logind is back on the bus,
    /// and a few seconds after logind refused it.
    var needsInhibitor = false
    /// Between PrepareForSleep(true) and PrepareForSleep(false).
    var asleep = false

    init(path: String) { self.path = path }

    deinit { releaseInhibitor() }

    func releaseInhibitor() {
        if let inhibitor { close(inhibitor) }
        inhibitor = nil
    }

    private func countLock(wasLocked: Bool) {
        if !wasLocked && (lockedHint || lockRequested) { timesLocked += 1 }
    }
}

/// Finds the session, then follows its LockedHint until the wakeup is signalled or the connection
/// fails. Runs on the lock's own thread: the connection never leaves it.
struct LogindFollower: Sendable {
    let busAddress: String?
    let session: String?
    /// `$XDG_SESSION_ID`, read by the initialiser.
    let environmentSessionID: String?
    let timeout: Duration
    let cache: LockStateCache
    let wakeup: Wakeup
    /// Run on this thread with true when logind announces a suspend, before the inhibitor that
    /// made logind wait for it is released, and with false at the wake; nil takes no inhibitor.
    let aroundSleep: (@Sendable (_ starting: Bool) -> Void)?

    func run(startup: FollowerStartup) {
        let bus: BusConnection
        do {
            bus = try BusConnection(address: busAddress, description: "tpm-keychain-logind", methodCallTimeout: timeout)
        } catch {
            let place = busAddress ?? "the system bus"
            startup.finish(
                .failure(
                    LogindSessionLockError(.busUnavailable, "\(place) cannot be reached: \(error)", underlying: error)))
            return
        }
        let followed: FollowedSession
        do throws(LogindSessionLockError) {
            followed = FollowedSession(path: try findSession(on: bus))
            // Subscribed before LockedHint is read, so no change after the read can be missed.
            try subscribe(followed, on: bus)
            followed.lockedHint = try readLockedHint(followed.path, on: bus)
        } catch {
            startup.finish(.failure(error))
            return
        }
        if aroundSleep != nil { takeInhibitor(followed, on: bus) }
        publish(followed)
        startup.finish(.success(followed.path))
        follow(followed, on: bus)
    }

    // MARK: Finding the session

    private func findSession(on bus: BusConnection) throws(LogindSessionLockError) -> String {
        if let session {
            return try sessionPath(id: session, on: bus, origin: "The session \"\(session)\"")
        }
        do {
            return try managerCall("GetSessionByPID", [.uint32(UInt32(bitPattern: getpid()))], on: bus)
        } catch  where error.name == Logind.ErrorName.noSessionForPID {
            // Not in a session (a user service, a cron job): try what the environment says.
        } catch {
            throw Self.failure(error, asking: "GetSessionByPID")
        }
        if let id = environmentSessionID, !id.isEmpty {
            do {
                return try managerCall("GetSession", [.string(id)], on: bus)
            } catch  where error.name == Logind.ErrorName.noSuchSession {
                // A stale variable (inherited from a session that has ended): the display session.
            } catch {
                throw Self.failure(error, asking: "GetSession")
            }
        }
        return try displaySession(on: bus)
    }

    private func sessionPath(id: String, on bus: BusConnection, origin: String) throws(LogindSessionLockError) -> String
    {
        do {
            return try managerCall("GetSession", [.string(id)], on: bus)
        } catch  where error.name == Logind.ErrorName.noSuchSession {
            throw LogindSessionLockError(
                .noSession, "\(origin) is not a session logind knows (\(error))", underlying: error)
        } catch {
            throw Self.failure(error, asking: "GetSession")
        }
    }

    /// The user's graphical session: User.Display, ("", "/") when there is none.
    private func displaySession(on bus: BusConnection) throws(LogindSessionLockError) -> String {
        let uid = getuid()
        let user: String
        do {
            user = try managerCall("GetUser", [.uint32(uid)], on: bus)
        } catch  where error.name == Logind.ErrorName.noSuchUser || error.name == Logind.ErrorName.noUserForPID {
            throw LogindSessionLockError(
                .noSession, "This process belongs to no session, and user \(uid) is not logged in (\(error))",
                underlying: error)
        } catch {
            throw Self.failure(error, asking: "GetUser")
        }
        let display: (id: String, path: String)?
        do {
            display = try bus.call(
                destination: Logind.service, path: user, interface: Logind.propertiesInterface, member: "Get",
                arguments: [.string(Logind.userInterface), .string("Display")]
            ) { message -> (id: String, path: String)? in
                guard message.enter("v", "(so)"), message.enter("r", "so"),
                    let id = message.readString(), let path = message.readString("o"),
                    message.exit(), message.exit()
                else { return nil }
                return (id, path)
            }
        } catch {
            throw Self.failure(error, asking: "the user's Display")
        }
        guard let display else {
            throw LogindSessionLockError(.unexpectedReply, "logind's User.Display of user \(uid) is not a (so) pair")
        }
        guard !display.id.isEmpty, display.path != "/" else {
            throw LogindSessionLockError(
                .noSession, "This process belongs to no session, and user \(uid) has no display session")
        }
        return display.path
    }

    /// A Manager method that answers an object path.
    private func managerCall(
        _ member: String, _ arguments: [BusArgument], on bus: BusConnection
    ) throws(BusError) -> String {
        let path = try bus.call(
            destination: Logind.service, path: Logind.managerPath, interface: Logind.managerInterface, member: member,
            arguments: arguments, read: { $0.readString("o") }
        )
        guard let path else {
            throw BusError(operation: member, name: nil, message: "the reply has no object path", errno: EBADMSG)
        }
        return path
    }
}

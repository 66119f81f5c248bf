import DBus
import SystemCalls
public import TPMKeychain

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The login session's screen lock as systemd-logind reports it (`LockedHint`), for
/// ``TPMKeychain/KeychainLocation/sessionLock``: whenUnlocked items are refused while it is set.
///
/// ```swift
/// var location = KeychainLocation.default
/// location.sessionLock = try LogindSessionLock()          // this process's session
/// let keychain = try Keychain(service: "com.example.app", location: location)
/// ```
///
/// What `LockedHint` means: the property `LockedHint` of logind's
/// `org.freedesktop.login1.Session` object is whatever the session's screen locker last told
/// logind through `SetLockedHint(true)` when it locked and `SetLockedHint(false)` when it
/// unlocked (GNOME Shell, KDE's screen locker and other lockers that speak to logind do this).
/// logind locks nothing itself and checks nothing: it stores the hint and announces changes with
/// `PropertiesChanged`. A session without such a desktop (a text console, ssh, a bare window
/// manager, a locker that does not call SetLockedHint) never sets it, so it stays false: no
/// desktop, no hint, always "unlocked".
///
/// logind's `Lock` and `Unlock` signals (`loginctl lock-session`, `LockSessions`) ask the screen
/// locker to act; they are not state. This lock counts a `Lock` request as locked at once, until
/// the next `LockedHint` notification or an `Unlock` request: the locker then has its say, and an
/// `Unlock` request never unlocks on its own while `LockedHint` is true. Without a locker, a
/// `Lock` request keeps the session counted as locked until `Unlock`.
///
/// The value is cached: a thread of this object's own (never one of Swift concurrency's) holds a
/// connection to the bus, subscribed to the session's `PropertiesChanged`, `Lock` and `Unlock`,
/// logind's `SessionRemoved` and the bus's `NameOwnerChanged` for logind, so ``isLocked()`` only
/// reads memory. When the state cannot be known, ``isLocked()`` throws and the keychain treats
/// the session as locked: the connection to the bus failed, logind left the bus (until it comes
/// back and answers again), the session ended, or ``stop()`` was called.
///
/// - Important: This check is the library's, not the TPM's. The TPM unseals a whenUnlocked item
///   whatever logind says, and `LockedHint` is only a hint: any process of the session's user (or
///   root) may call `SetLockedHint(false)`, and code of the same user can open the store without
///   setting ``TPMKeychain/KeychainLocation/sessionLock``. It keeps this process's own reads
///   in line with the screen lock; it is no barrier against code running as the same user.
///   docs/SECURITY.md describes what the TPM enforces.
/// - Important: Lock states count only on a device with a passcode
///   (``TPMKeychain/KeychainDevice/setPasscode(_:)``). Without one the device is always unlocked,
///   as an iPhone without a passcode: whenUnlocked items stay under the store's master key, and
///   the keychain does not ask this lock.
/// - Important: Notifications take a moment to arrive: a read in the first milliseconds after the
///   locker sets the hint may still see the session unlocked.
/// - Important: The session is found once, at initialisation. When it ends (log out and in again),
///   ``isLocked()`` throws `.noSession` for good: make a new lock for the new session.
public final class LogindSessionLock: SessionLockState {
    /// The D-Bus address this lock connected to; nil for the system bus.
    public let busAddress: String?
    /// logind's object path of the session followed (`/org/freedesktop/login1/session/_32`).
    public let sessionPath: String

    private let cache: LockStateCache
    private let wakeup: Wakeup
    private let thread: Locked<JoinableThread?>

    /// Finds the session, reads its `LockedHint` and starts following it, then returns.
    ///
    /// With `session` nil, the session is this process's: logind's `GetSessionByPID(getpid())`;
    /// when the process belongs to no session (a systemd user service, a cron job), the session
    /// `$XDG_SESSION_ID` names (`GetSession`); when that is unset or unknown, the user's display
    /// session (the property `Display` of `GetUser(getuid())`), the graphical session whose
    /// screen locker matters.
    ///
    /// Blocks the calling thread while the lock's own thread asks logind and the bus (a few calls,
    /// each waiting at most `timeout`).
    ///
    /// - Parameters:
    ///   - busAddress: a D-Bus address (`unix:path=...`) to find logind on, for a private bus in
    ///     tests; nil for the system bus (`DBUS_SYSTEM_BUS_ADDRESS` when set, else
    ///     /run/dbus/system_bus_socket).
    ///   - session: a logind session ID (`loginctl list-sessions`, such as "2" or "c1"); nil for
    ///     this process's session, found as described above.
    ///   - timeout: how long one call to logind may wait for its answer.
    /// - Throws: ``LogindSessionLockError``:
    ///   - `.busUnavailable`: the bus cannot be reached.
    ///   - `.logindUnavailable`: logind is not on the bus, did not answer within `timeout`, or the
    ///     bus policy does not let this process ask it.
    ///   - `.noSession`: `session` is not a session logind knows, or with `session` nil, the
    ///     process has no session, `$XDG_SESSION_ID` none logind knows, and the user no display
    ///     session.
    ///   - `.unexpectedReply`: logind answered with something its interface does not describe.
    ///   - `.systemCallFailed`: no eventfd or no thread could be made.
    public convenience init(
        busAddress: String? = nil, session: String? = nil, timeout: Duration = .seconds(5)
    ) throws(LogindSessionLockError) {
        let variable = getenv("XDG_SESSION_ID").map { String(cString: $0) }
        try self.init(busAddress: busAddress, session: session, timeout: timeout, environmentSessionID: variable)
    }

    /// The public initialiser, and `aroundSleep`: run on the lock's thread with true each time
    /// logind announces a suspend or hibernation, while a delay inhibitor this lock takes from
    /// logind (`Inhibit("sleep", …, "delay")`) makes the suspend wait for it, up to logind's
    /// InhibitDelayMaxSec; and with false at the wake. The session holder erases its keys there.
    package convenience init(
        busAddress: String?, session: String?, aroundSleep: @escaping @Sendable (_ starting: Bool) -> Void
    ) throws(LogindSessionLockError) {
        let variable = getenv("XDG_SESSION_ID").map { String(cString: $0) }
        try self.init(
            busAddress: busAddress, session: session, timeout: .seconds(5), environmentSessionID: variable,
            aroundSleep: aroundSleep)
    }

    /// The public initialiser with `$XDG_SESSION_ID` given rather than read, so tests need not
    /// change the process's environment.
    init(
        busAddress: String?, session: String?, timeout: Duration, environmentSessionID: String?,
        aroundSleep: (@Sendable (_ starting: Bool) -> Void)? = nil
    ) throws(LogindSessionLockError) {
        self.busAddress = busAddress
        cache = LockStateCache()
        do {
            wakeup = try Wakeup()
        } catch {
            throw LogindSessionLockError(
                .systemCallFailed, "No eventfd for the session lock's thread: \(error)", underlying: error)
        }
        let follower = LogindFollower(
            busAddress: busAddress, session: session, environmentSessionID: environmentSessionID, timeout: timeout,
            cache: cache, wakeup: wakeup, aroundSleep: aroundSleep
        )
        let startup = FollowerStartup()
        let thread: JoinableThread
        do {
            thread = try JoinableThread { follower.run(startup: startup) }
        } catch {
            throw LogindSessionLockError(.systemCallFailed, "Cannot start the session lock's thread", underlying: error)
        }
        switch startup.wait() {
        case .success(let path):
            sessionPath = path
            self.thread = Locked(thread)
        case .failure(let error):
            // The thread ends as soon as it has reported a failure.
            thread.join()
            throw error
        }
    }

    deinit { stop() }

    /// Whether the session is locked now: `LockedHint`, or a `Lock` request not yet answered (see
    /// the type's documentation). Reads the cached value; never blocks on the bus.
    ///
    /// - Throws: ``LogindSessionLockError`` when the state cannot be known, which the keychain
    ///   treats as locked:
    ///   - `.connectionLost`: the connection to the bus failed (the bus went away).
    ///   - `.logindUnavailable`: logind left the bus, or did not answer when it came back.
    ///   - `.noSession`: the session ended (logind's `SessionRemoved`), or logind came back
    ///     without it.
    ///   - `.unexpectedReply`: logind announced a `LockedHint` that is not a boolean and could
    ///     not be read back.
    ///   - `.stopped`: ``stop()`` was called.
    public func isLocked() throws(LogindSessionLockError) -> Bool {
        try cache.isLocked()
    }

    /// How many times the session went from unlocked to locked since this lock started following
    /// it (a session locked at the start counts one), each `LockedHint` or `Lock` signal counted as
    /// it arrived: a lock undone before anyone looked still counts.
    ///
    /// - Throws: as ``isLocked()``.
    public func timesLocked() throws(LogindSessionLockError) -> UInt64? {
        try cache.timesLocked()
    }

    /// How many times logind announced that the machine is about to suspend or hibernate
    /// (`PrepareForSleep(true)`) since this lock started following the session.
    ///
    /// - Throws: as ``isLocked()``.
    public func timesSuspended() throws(LogindSessionLockError) -> UInt64 {
        try cache.timesSuspended()
    }

    /// Stops following the session: the thread closes its connection and ends before this
    /// returns (waiting for a call to logind in progress, at most the `timeout` given at
    /// initialisation). Afterwards ``isLocked()`` throws `.stopped`. Calling it again does
    /// nothing; deinit calls it.
    public func stop() {
        cache.stop()
        guard let thread = self.thread.withLock({ $0.take() }) else { return }
        wakeup.signal()
        thread.join()
    }
}

/// Why a ``LogindSessionLock`` could not start, or why it cannot tell whether the session is
/// locked (the keychain then counts the session as locked).
public struct LogindSessionLockError: Error, Sendable, CustomStringConvertible {
    /// What a caller acts on. An extensible set: new codes are added as static members, so a
    /// `switch` over codes needs a `default`.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        /// A stable name, for logs and scripts.
        public let name: String

        fileprivate init(_ name: String) { self.name = name }

        /// The code's name, as in the source (`noSession`).
        public var description: String { name }

        /// The bus cannot be reached (no socket, connection refused, authentication failed).
        public static let busUnavailable = Code("busUnavailable")
        /// logind (`org.freedesktop.login1`) is not on the bus, left it, did not answer in time,
        /// or the bus policy does not let this process ask it (a sandbox).
        public static let logindUnavailable = Code("logindUnavailable")
        /// No session to follow: an ID logind does not know, a process outside any session and
        /// without a display session, or a session that has ended.
        public static let noSession = Code("noSession")
        /// The connection to the bus failed after the lock started (the bus went away).
        public static let connectionLost = Code("connectionLost")
        /// logind's answer does not match its interface (a `LockedHint` that is not a boolean).
        public static let unexpectedReply = Code("unexpectedReply")
        /// ``LogindSessionLock/stop()`` was called.
        public static let stopped = Code("stopped")
        /// An eventfd or a thread could not be made (the process's limits).
        public static let systemCallFailed = Code("systemCallFailed")
    }

    /// What a caller acts on.
    public let code: Code
    /// What happened, for people.
    public let message: String
    /// The lower-level error, for logs: the D-Bus error reply or the errno.
    public let underlyingError: (any Error)?

    init(_ code: Code, _ message: String, underlying: (any Error)? = nil) {
        self.code = code
        self.message = message
        self.underlyingError = underlying
    }

    /// The code and the message.
    public var description: String { "LogindSessionLockError.\(code): \(message)" }
}

import DBus
import Dispatch
import FoundationEssentials
import SystemCalls
public import TPMKeychain

#if canImport(Glibc)
import Glibc
#endif

/// A fingerprint reader through fprintd, the system D-Bus service `net.reactivated.Fprint`: Linux's
/// Touch ID.
///
/// ```swift
/// let reader = FprintdAuthenticator()
/// let context = AuthenticationContext(authenticator: reader, passcode: .prompt(askUser))
/// let token: String? = try await keychain.get("token", context: context)
/// ```
///
/// Every call opens its own connection to the bus, from a thread of this authenticator's own
/// (blocking sd-bus calls never run on Swift concurrency's cooperative threads), and closes it
/// when done. Verifications run one at a time, in call order; ``enrollment()`` does not wait for
/// them.
///
/// The caller's user is the one fprintd checks (username ""), and polkit decides whether that
/// user may use the reader (action `net.reactivated.fprint.device.verify`; the default allows a
/// user in an active local session). fprintd shows no prompt of its own: show `reason` yourself.
///
/// - Important: What an enrollment change can be seen as. fprintd tells a non-root caller only the
///   *names* of the enrolled fingers (ListEnrolledFingers, such as "right-index-finger"); the
///   prints themselves are under /var/lib/fprint, mode 0700, readable by root alone, and fprintd
///   sends no signal when they change. So the ``Enrollment/identifier`` (SHA-256 of the default
///   device's object path and the sorted finger names) changes when a finger is added or removed,
///   or when another reader becomes the default, but **not** when a finger is deleted and enrolled
///   again under the same name, which is how a person would add someone else's print. Being a
///   hash of names, it also comes back: remove a finger and enroll it again, and the earlier
///   identifier returns. Apple's `biometryCurrentSet` sees both changes; this authenticator
///   cannot, unless the enrollment helper is installed (`tpm-keychain-enrollment`, a root
///   service that tells each user a keyed hash of their own print files): the identifier then
///   covers the prints too, and a device that noted the names alone adopts it without
///   invalidating anything.
public final class FprintdAuthenticator: Authenticator {
    /// Always `.touchID`: a fingerprint reader.
    public let biometryType: BiometryType = .touchID
    /// The D-Bus address this authenticator connects to; nil for the system bus.
    public let busAddress: String?
    /// How long ``verify(reason:)`` waits for a finger before it gives up.
    public let timeout: Duration
    /// The enrollment helper's socket (`tpm-keychain-enrollment`, run by root), asked for a hash
    /// of this user's print files when it is there.
    public let enrollmentHelperSocket: String

    private let verifications = DispatchQueue(label: "TPMKeychainFprintd.FprintdAuthenticator.verify")
    private let queries = DispatchQueue(label: "TPMKeychainFprintd.FprintdAuthenticator.enrollment")
    private let running = Locked<[ObjectIdentifier: VerificationCancellation]>([:])

    /// - Parameters:
    ///   - busAddress: a D-Bus address (`unix:path=...`) to find fprintd on, for a private bus in
    ///     tests; nil for the system bus (`DBUS_SYSTEM_BUS_ADDRESS` when set, else
    ///     /run/dbus/system_bus_socket).
    ///   - timeout: how long a verification waits for a finger (pam_fprintd's default: 30 s).
    ///   - enrollmentHelperSocket: where the enrollment helper listens; nil for
    ///     `TPM_KEYCHAIN_ENROLLMENT_HELPER` when set, else /run/tpm-keychain-enrollment.sock.
    public init(busAddress: String? = nil, timeout: Duration = .seconds(30), enrollmentHelperSocket: String? = nil) {
        self.busAddress = busAddress
        self.timeout = timeout
        self.enrollmentHelperSocket =
            enrollmentHelperSocket ?? ProcessInfo.processInfo.environment[EnrollmentHelperClient.socketVariable]
            ?? EnrollmentHelperClient.defaultSocket
    }

    /// Whether the enrollment helper is installed (its socket is there), so that a finger enrolled
    /// again under the same name is seen as an enrollment change.
    public var enrollmentHelperIsInstalled: Bool {
        access(enrollmentHelperSocket, F_OK) == 0
    }

    /// The default reader's enrolled fingers for the calling user, as an opaque identifier.
    ///
    /// - Returns: nil when no finger is enrolled (`NoEnrolledPrints`, or an empty list).
    /// - Throws: ``AuthenticationError`` `.biometryNotAvailable` when there is no reader
    ///   (`NoSuchDevice`), fprintd or the bus cannot be reached, or polkit refuses
    ///   (`PermissionDenied`).
    /// - Important: The identifier changes when a finger is added or removed, not when a finger is
    ///   enrolled again under the same name (see the type's documentation).
    public func enrollment() async throws(AuthenticationError) -> Enrollment? {
        let client = FprintdClient(
            busAddress: busAddress, methodCallTimeout: Self.methodCallTimeout(timeout),
            helperSocket: enrollmentHelperSocket)
        return try await Self.run(on: queries) { () throws(AuthenticationError) in try client.enrollment() }
    }

    /// Claims the default reader, waits for any enrolled finger, and releases the reader again,
    /// whatever the outcome.
    ///
    /// Retry statuses (`verify-retry-scan`, a swipe too short, ...) keep the verification waiting
    /// for another touch until ``timeout``.
    ///
    /// - Parameter reason: why the app asks; fprintd shows nothing, so present it yourself.
    /// - Throws: ``AuthenticationError``:
    ///   - `.authenticationFailed`: `verify-no-match` (another finger, or someone else).
    ///   - `.systemCancel`: no final status within ``timeout``, which usually means no finger was
    ///     presented; not counted as a failed match.
    ///   - `.appCancel`: ``cancel()`` was called, or the calling task was cancelled.
    ///   - `.biometryNotEnrolled`: the user has no enrolled finger.
    ///   - `.biometryNotAvailable`: no reader, `verify-disconnected`, `verify-unknown-error`, the
    ///     reader claimed by another client (`AlreadyInUse`), polkit refusing
    ///     `net.reactivated.fprint.device.verify` (`PermissionDenied`), or fprintd or the bus
    ///     unreachable.
    public func verify(reason: String) async throws(AuthenticationError) {
        let wakeup: Wakeup
        do {
            wakeup = try Wakeup()
        } catch {
            throw AuthenticationError(.biometryNotAvailable, "No eventfd for the verification: \(error)")
        }
        let cancellation = VerificationCancellation(wakeup: wakeup)
        let key = ObjectIdentifier(cancellation)
        running.withLock { $0[key] = cancellation }
        defer { _ = running.withLock { $0.removeValue(forKey: key) } }

        let client = FprintdClient(busAddress: busAddress, methodCallTimeout: Self.methodCallTimeout(timeout))
        let timeout = self.timeout
        let queue = verifications
        // withTaskCancellationHandler is untyped (rethrows), so the outcome travels as a Result.
        let outcome: Result<Void, AuthenticationError> = await withTaskCancellationHandler {
            do throws(AuthenticationError) {
                try await Self.run(on: queue) { () throws(AuthenticationError) in
                    try client.verify(cancellation: cancellation, timeout: timeout)
                }
                return .success(())
            } catch {
                return .failure(error)
            }
        } onCancel: {
            cancellation.cancel()
        }
        try outcome.get()
    }

    /// Stops every verification in progress or waiting to start: each issues VerifyStop and
    /// Release, then fails with `.appCancel`. With none running, does nothing (a later
    /// ``verify(reason:)`` is not affected).
    public func cancel() async {
        let current = running.withLock { Array($0.values) }
        for cancellation in current { cancellation.cancel() }
    }

    /// Runs a blocking `body` on `queue` and resumes the caller with its result.
    private static func run<T: Sendable>(
        on queue: DispatchQueue, _ body: @escaping @Sendable () throws(AuthenticationError) -> T
    ) async throws(AuthenticationError) -> T {
        let result: Result<T, AuthenticationError> = await withCheckedContinuation { continuation in
            queue.async {
                do throws(AuthenticationError) {
                    continuation.resume(returning: .success(try body()))
                } catch {
                    continuation.resume(returning: .failure(error))
                }
            }
        }
        return try result.get()
    }

    /// One method call (Claim, ListEnrolledFingers, ...) waits at most this long for fprintd.
    private static func methodCallTimeout(_ timeout: Duration) -> Duration {
        min(max(timeout, .seconds(5)), .seconds(25))
    }
}

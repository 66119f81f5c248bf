import Crypto
public import FoundationEssentials
public import KeychainService
import KeychainVocabulary
import SystemCalls
public import TPM

/// What an authentication checks (LAPolicy).
public enum AuthenticationPolicy: Sendable, Hashable {
    /// Biometry only (deviceOwnerAuthenticationWithBiometrics).
    case deviceOwnerAuthenticationWithBiometrics
    /// Biometry, or the device passcode when biometry is unavailable or the person chooses it
    /// (deviceOwnerAuthentication).
    case deviceOwnerAuthentication
}

/// Where the device passcode comes from when an item or a policy needs it.
public struct PasscodeSource: Sendable {
    let obtain: @Sendable (_ reason: String) async throws(AuthenticationError) -> SecretBytes

    /// Asks `prompt` with the reason; nil means the person cancelled.
    public static func prompt(_ prompt: @escaping @Sendable (_ reason: String) async -> String?) -> PasscodeSource {
        PasscodeSource { (reason) throws(AuthenticationError) in
            guard let passcode = await prompt(reason) else {
                throw AuthenticationError(.userCancel, "The passcode prompt was cancelled")
            }
            return SecretBytes(copying: Array(passcode.utf8))
        }
    }

    /// Asks `prompt` with the reason for the passcode's bytes; nil means the person cancelled.
    public static func secret(_ prompt: @escaping @Sendable (_ reason: String) async -> SecretBytes?) -> PasscodeSource
    {
        PasscodeSource { (reason) throws(AuthenticationError) in
            guard let passcode = await prompt(reason) else {
                throw AuthenticationError(.userCancel, "The passcode prompt was cancelled")
            }
            return passcode
        }
    }

    /// A passcode known in advance (tests, unattended tools that read it from a file descriptor).
    public static func fixed(_ passcode: SecretBytes) -> PasscodeSource {
        PasscodeSource { (_) throws(AuthenticationError) in passcode }
    }
}

/// Something that carries an ``AuthenticationContext``: the context itself, or an `LAContext`
/// of LocalAuthenticationCompat (what `kSecUseAuthenticationContext` accepts).
public protocol AuthenticationContextProviding {
    /// The context that asks the person and keeps what was opened for its reuse window.
    var authenticationContext: AuthenticationContext { get }
}

extension AuthenticationContext: AuthenticationContextProviding {
    /// The context itself.
    public var authenticationContext: AuthenticationContext { self }
}

/// An authentication context, as LAContext: it evaluates policies with a reason, remembers a
/// success for ``allowableReuseDuration`` (one prompt for several reads, never past a TPM
/// reset), can be forbidden to interact, and can be invalidated. Pass it to the `Keychain` calls
/// that may need a person.
///
/// ```swift
/// let context = AuthenticationContext(authenticator: fingerprintReader, passcode: .prompt(askUser))
/// context.allowableReuseDuration = .seconds(60)
/// let token: String? = try await keychain.get("token", context: context)
/// ```
public final class AuthenticationContext: Sendable {
    /// The longest reuse window (LATouchIDAuthenticationMaximumAllowableReuseDuration).
    public static let maximumReuseDuration: Duration = .seconds(300)

    /// The biometric authenticator, if the device has one.
    public let authenticator: (any Authenticator)?
    /// Where the device passcode comes from; nil when this context cannot ask for it.
    public let passcode: PasscodeSource?
    /// Scopes ``domainState()``: two applications see different values for one enrollment, as on iOS.
    public let applicationIdentifier: String
    /// The device whose passcode and lock state a policy evaluation checks.
    public let location: KeychainLocation

    struct State {
        var reason = ""
        var interactionNotAllowed = false
        var reuse: Duration = .zero
        var invalidated = false
        var evaluating = false
        /// The last biometric match: when, and against which enrollment.
        var match: (at: ContinuousClock.Instant, enrollment: Enrollment)?
        var prompts = 0
    }

    let state = Locked(State())

    /// The key records this context opened, kept by the service for the reuse window: the
    /// context holds them without knowing what they are.
    package let openedRecords = OpenedRecords()

    /// How stale the TPM-reset check of a reuse window may be: the TPM's reset count is read at
    /// most this often (a TPM round trip would cost more than the read it saves).
    public static let resetCheckInterval: Duration = OpenedRecords.resetCheckInterval

    /// A context that asks `authenticator` for biometry and `passcode` for the device passcode.
    /// Nothing is asked until an evaluation or a protected read needs it.
    ///
    /// - Parameters:
    ///   - authenticator: a biometric authenticator, or nil for none.
    ///   - passcode: how to get the device passcode, or nil when this context cannot.
    ///   - applicationIdentifier: scopes ``domainState()``; nil for the process name.
    ///   - location: the store whose device a passcode evaluation checks.
    public init(
        authenticator: (any Authenticator)? = nil, passcode: PasscodeSource? = nil,
        applicationIdentifier: String? = nil, location: KeychainLocation = .default
    ) {
        self.authenticator = authenticator
        self.passcode = passcode
        self.applicationIdentifier = applicationIdentifier ?? ProcessInfo.processInfo.processName
        self.location = location
    }

    /// Shown by the authenticator and the passcode prompt (kSecUseOperationPrompt, localizedReason).
    public var localizedReason: String {
        get { state.withLock { $0.reason } }
        set { state.withLock { $0.reason = newValue } }
    }

    /// When true, anything that would prompt fails with `.notInteractive` instead
    /// (errSecInteractionNotAllowed for keychain calls).
    public var interactionNotAllowed: Bool {
        get { state.withLock { $0.interactionNotAllowed } }
        set { state.withLock { $0.interactionNotAllowed = newValue } }
    }

    /// How long a success is reused without a new prompt: 0 (the default) to ``maximumReuseDuration``.
    public var allowableReuseDuration: Duration {
        get { state.withLock { $0.reuse } }
        set { state.withLock { $0.reuse = min(max(newValue, .zero), Self.maximumReuseDuration) } }
    }

    /// How many times this context asked a person (biometry or passcode).
    public var promptCount: Int { state.withLock { $0.prompts } }

    /// Ends the context: a pending evaluation fails with `.appCancel`, later ones with
    /// `.invalidContext`; keys it kept are erased.
    public func invalidate() {
        let wasEvaluating = state.withLock { state in
            state.invalidated = true
            state.match = nil
            return state.evaluating
        }
        openedRecords.removeAll()
        if wasEvaluating, let authenticator {
            Task { await authenticator.cancel() }
        }
    }

    /// Whether ``evaluate(_:reason:)`` could succeed now, without prompting.
    ///
    /// - Throws: ``AuthenticationError`` `.biometryNotAvailable`, `.biometryNotEnrolled`,
    ///   `.passcodeNotSet`, `.invalidContext`.
    public func canEvaluate(_ policy: AuthenticationPolicy) async throws(AuthenticationError) {
        try checkValid()
        let enrolled: Enrollment?
        if let authenticator { enrolled = try await authenticator.enrollment() } else { enrolled = nil }
        switch policy {
        case .deviceOwnerAuthenticationWithBiometrics:
            guard authenticator != nil else {
                throw AuthenticationError(.biometryNotAvailable, "No biometric authenticator")
            }
            guard enrolled != nil else { throw AuthenticationError(.biometryNotEnrolled, "No biometry is enrolled") }
        case .deviceOwnerAuthentication:
            if enrolled != nil { return }
            guard passcode != nil, try passcodeIsSet() else {
                throw AuthenticationError(.passcodeNotSet, "Neither biometry nor a device passcode is available")
            }
        }
    }

    /// Authenticates the person for `policy`, showing `reason`; a success is reused within
    /// ``allowableReuseDuration``.
    ///
    /// - Throws: ``AuthenticationError``.
    public func evaluate(_ policy: AuthenticationPolicy, reason: String) async throws(AuthenticationError) {
        try await canEvaluate(policy)
        if let authenticator, let enrolled = try await authenticator.enrollment() {
            do throws(AuthenticationError) {
                _ = try await biometricMatch(authenticator, enrolled: enrolled, reason: reason)
                return
            } catch let error where error.code == .userFallback && policy == .deviceOwnerAuthentication {
                // Fall through to the passcode.
            }
        }
        let passcode = try await obtainPasscode(reason: reason)
        do throws(KeychainError) {
            try KeychainDevice(location: location).unlock(passcode: passcode)
        } catch {
            throw AuthenticationError(error.code == .lockout ? .biometryLockout : .authenticationFailed, error.message)
        }
    }

    /// The enrollment's state hash for this application (LADomainState.biometry.stateHash): nil
    /// when nothing is enrolled; changes with every enrollment change; differs between
    /// applications.
    public func domainState() async -> Data? {
        guard let authenticator, let enrolled = try? await authenticator.enrollment() else { return nil }
        let mac = HMAC<SHA256>.authenticationCode(
            for: enrolled.identifier, using: SymmetricKey(data: Array(applicationIdentifier.utf8)))
        return Data(mac)
    }
}

// Asking the person, for evaluations and for the service opening a protected item's key record.
extension AuthenticationContext: ProofSource {
    /// A biometric match, reused within the window for the same enrollment.
    package func biometricMatch(
        _ authenticator: any Authenticator, enrolled: Enrollment,
        reason: String
    ) async throws(AuthenticationError) -> Enrollment {
        let reused = state.withLock { state -> Bool in
            guard let match = state.match, match.enrollment == enrolled else { return false }
            return ContinuousClock.now - match.at <= state.reuse && state.reuse > .zero
        }
        if reused { return enrolled }
        try beginPrompt()
        defer { state.withLock { $0.evaluating = false } }
        try await authenticator.verify(reason: reason.isEmpty ? "access the keychain" : reason)
        try checkValid()
        state.withLock { $0.match = (.now, enrolled) }
        return enrolled
    }

    package func obtainPasscode(reason: String) async throws(AuthenticationError) -> SecretBytes {
        guard let passcode else {
            throw AuthenticationError(
                .passcodeNotSet, "The item needs the device passcode and this context has no way to ask for it")
        }
        try beginPrompt()
        defer { state.withLock { $0.evaluating = false } }
        return try await passcode.obtain(reason.isEmpty ? "access the keychain" : reason)
    }

    func beginPrompt() throws(AuthenticationError) {
        try state.withLock { (state) throws(AuthenticationError) in
            guard !state.invalidated else { throw AuthenticationError(.invalidContext, "The context was invalidated") }
            guard !state.interactionNotAllowed else {
                throw AuthenticationError(
                    .notInteractive, "Authentication needs a person and the context does not allow interaction")
            }
            state.evaluating = true
            state.prompts += 1
        }
    }

    package func checkValid() throws(AuthenticationError) {
        if state.withLock({ $0.invalidated }) {
            throw AuthenticationError(.invalidContext, "The context was invalidated")
        }
    }

    func passcodeIsSet() throws(AuthenticationError) -> Bool {
        do {
            return try KeychainDevice(location: location).passcodeIsSet()
        } catch {
            throw AuthenticationError(.biometryNotAvailable, error.message)
        }
    }

    package func forgetMatch() {
        state.withLock { $0.match = nil }
    }
}

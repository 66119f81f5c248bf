import SystemCalls
public import TPMKeychain

/// A biometric authenticator for tests, as the iOS Simulator's Face ID / Touch ID menu: enroll,
/// unenroll, enroll again, and say what the next attempt does. Deterministic and in-process.
///
/// ```swift
/// let face = SimulatedAuthenticator(biometryType: .faceID)
/// let context = AuthenticationContext(authenticator: face, location: location)
/// face.nextOutcomes = [.match]
/// _ = try await keychain.get("token", as: String.self, context: context)   // one verification
/// face.reenroll()                                                          // the TPM now refuses biometryCurrentSet items
/// ```
public final class SimulatedAuthenticator: Authenticator {
    /// What an attempt does.
    public enum Outcome: Sendable, Hashable {
        /// The person matches.
        case match
        /// Someone else, or a bad scan: `.authenticationFailed`, counted toward the lockout.
        case noMatch
        /// The person dismisses the prompt: `.userCancel`.
        case cancel
        /// The person chooses the passcode instead: `.userFallback`.
        case fallback
    }

    private struct State {
        var enrolled: Set<String> = []
        var identifier: [UInt8] = []
        var outcomes: [Outcome] = []
        var defaultOutcome: Outcome = .match
        var attempts = 0
        var consecutiveFailures = 0
        var cancelled = false
    }

    /// The kind of biometry simulated, as given to ``init(biometryType:enrolled:maximumFailures:)``.
    public let biometryType: BiometryType
    /// Consecutive failures after which verification fails with `.biometryLockout`.
    public let maximumFailures: Int
    private let state = Locked(State())

    /// A simulated reader with `enrolled` enrolled; every attempt matches until told otherwise.
    ///
    /// - Parameters:
    ///   - biometryType: Face ID or Touch ID.
    ///   - enrolled: the names enrolled at start ("face", or fingers); empty for none.
    ///   - maximumFailures: failures before lockout (iOS: 5).
    public init(biometryType: BiometryType = .faceID, enrolled: Set<String> = ["face"], maximumFailures: Int = 5) {
        self.biometryType = biometryType
        self.maximumFailures = maximumFailures
        state.withLock { state in
            state.enrolled = enrolled
            state.identifier = enrolled.isEmpty ? [] : Self.freshIdentifier()
        }
    }

    // MARK: The simulator's menu

    /// Adds `name` (a finger, a face) to the enrolled set: the enrollment changes.
    public func enroll(_ name: String = "face") {
        state.withLock { state in
            state.enrolled.insert(name)
            state.identifier = Self.freshIdentifier()
        }
    }

    /// Removes `name` (or everything, when nil): the enrollment changes.
    public func unenroll(_ name: String? = nil) {
        state.withLock { state in
            if let name { state.enrolled.remove(name) } else { state.enrolled.removeAll() }
            state.identifier = state.enrolled.isEmpty ? [] : Self.freshIdentifier()
        }
    }

    /// Enrolls the same names again (Face ID "Reset"): the enrollment changes, though nothing was
    /// added or removed.
    public func reenroll() {
        state.withLock { state in
            if state.enrolled.isEmpty { state.enrolled = ["face"] }
            state.identifier = Self.freshIdentifier()
        }
    }

    /// The outcomes of the next attempts, in order; after them, ``defaultOutcome``.
    public var nextOutcomes: [Outcome] {
        get { state.withLock { $0.outcomes } }
        set { state.withLock { $0.outcomes = newValue } }
    }

    /// What attempts do when ``nextOutcomes`` is empty (`.match` at start).
    public var defaultOutcome: Outcome {
        get { state.withLock { $0.defaultOutcome } }
        set { state.withLock { $0.defaultOutcome = newValue } }
    }

    /// How many times ``verify(reason:)`` was called: the prompts a person would have seen.
    public var attempts: Int { state.withLock { $0.attempts } }

    /// Ends a biometry lockout (on iOS, entering the passcode does this).
    public func resetLockout() {
        state.withLock { $0.consecutiveFailures = 0 }
    }

    // MARK: Authenticator

    /// The current enrollment, nil when nothing is enrolled. Its identifier is random and new
    /// after every ``enroll(_:)``, ``unenroll(_:)`` and ``reenroll()``. Never throws.
    public func enrollment() async throws(AuthenticationError) -> Enrollment? {
        state.withLock { state in
            state.enrolled.isEmpty ? nil : Enrollment(biometryType: biometryType, identifier: state.identifier)
        }
    }

    /// Plays the next outcome of ``nextOutcomes`` (else ``defaultOutcome``) at once, without
    /// asking anyone, and counts the attempt in ``attempts``.
    ///
    /// - Throws: `AuthenticationError` `.biometryNotEnrolled` when nothing is enrolled,
    ///   `.biometryLockout` after ``maximumFailures`` consecutive failures (until ``resetLockout()``),
    ///   `.appCancel` once after ``cancel()``, else as the outcome says: `.authenticationFailed`,
    ///   `.userCancel` or `.userFallback`.
    public func verify(reason: String) async throws(AuthenticationError) {
        let outcome = try state.withLock { (state) throws(AuthenticationError) -> Outcome in
            state.attempts += 1
            guard !state.enrolled.isEmpty else {
                throw AuthenticationError(.biometryNotEnrolled, "Nothing is enrolled")
            }
            guard state.consecutiveFailures < maximumFailures else {
                throw AuthenticationError(.biometryLockout, "Too many failed attempts: biometry is locked out")
            }
            if state.cancelled {
                state.cancelled = false
                throw AuthenticationError(.appCancel, "The verification was cancelled")
            }
            return state.outcomes.isEmpty ? state.defaultOutcome : state.outcomes.removeFirst()
        }
        switch outcome {
        case .match:
            state.withLock { $0.consecutiveFailures = 0 }
        case .noMatch:
            state.withLock { $0.consecutiveFailures += 1 }
            throw AuthenticationError(.authenticationFailed, "The biometry did not match")
        case .cancel:
            throw AuthenticationError(.userCancel, "The person cancelled")
        case .fallback:
            throw AuthenticationError(.userFallback, "The person chose the passcode")
        }
    }

    /// Makes the next ``verify(reason:)`` fail with `.appCancel`: a simulated verification
    /// completes at once, so there is never one in progress to stop.
    public func cancel() async {
        state.withLock { $0.cancelled = true }
    }

    private static func freshIdentifier() -> [UInt8] {
        // Random, so an enrollment never comes back: not after unenroll and enroll, not in another process.
        (0..<16).map { _ in UInt8.random(in: .min ... .max) }
    }
}

package import KeychainVocabulary

/// The kind of biometry an authenticator offers (LABiometryType).
public enum BiometryType: Sendable, Hashable, Codable {
    /// No biometry: the device has no authenticator, or one that offers none.
    case none
    /// A fingerprint reader (`FprintdAuthenticator` reports this).
    case touchID
    /// A face recogniser (`SimulatedAuthenticator`'s default in tests).
    case faceID
}

/// What an authenticator has enrolled, as far as it can tell.
public struct Enrollment: Sendable, Hashable {
    /// The kind of biometry.
    public let biometryType: BiometryType
    /// Opaque bytes that change with every change of the enrolled set (a finger or face added,
    /// removed, enrolled again) and never come back: `biometryCurrentSet` items are bound to it.
    public let identifier: [UInt8]

    /// An enrollment as an ``Authenticator`` reports it.
    ///
    /// - Parameters:
    ///   - biometryType: the kind of biometry enrolled.
    ///   - identifier: bytes that identify this enrolled set and no other, past or future.
    public init(biometryType: BiometryType, identifier: [UInt8]) {
        self.biometryType = biometryType
        self.identifier = identifier
    }

    /// An enrollment identified better than before, by an authenticator that could identify it
    /// only by `superseded` until now (fprintd's finger names, before the enrollment helper): a
    /// device that last noted `superseded` adopts `identifier` without treating it as a change, so
    /// no biometryCurrentSet item is invalidated by the better identifier alone.
    public init(biometryType: BiometryType, identifier: [UInt8], superseding superseded: [UInt8]) {
        self.biometryType = biometryType
        self.identifier = EnrollmentIdentifier.encode(identifier, superseding: superseded)
    }
}

/// A way to tell that the device's owner is present: a fingerprint reader (fprintd), a simulated
/// one in tests (`SimulatedAuthenticator` in TPMKeychainTesting), or your own.
///
/// The library asks ``enrollment()`` before honouring a match, so an enrollment change is seen
/// (and the TPM's enrollment counter moved) before any `biometryCurrentSet` item is released.
public protocol Authenticator: Sendable {
    /// The kind of biometry offered.
    var biometryType: BiometryType { get }
    /// The current enrollment, or nil when nothing is enrolled.
    ///
    /// - Throws: ``AuthenticationError`` `.biometryNotAvailable` when the device cannot be reached.
    func enrollment() async throws(AuthenticationError) -> Enrollment?
    /// Asks the person to authenticate, showing `reason`. Returns on a match.
    ///
    /// - Throws: ``AuthenticationError``: `.authenticationFailed`, `.userCancel`, `.biometryLockout`,
    ///   `.appCancel` (after ``cancel()``), `.biometryNotAvailable`, `.userFallback`.
    func verify(reason: String) async throws(AuthenticationError)
    /// Stops a verification in progress; it fails with `.appCancel`.
    func cancel() async
}

/// Why an authentication did not succeed, with LAError's codes.
public struct AuthenticationError: Error, Sendable, Hashable, CustomStringConvertible {
    /// LAError.Code, with Apple's raw values.
    public struct Code: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
        /// LAError's raw value.
        public let rawValue: Int
        /// A code from LAError's raw value; values Apple has not defined are kept as they are.
        public init(rawValue: Int) { self.rawValue = rawValue }

        /// The biometry did not match, or the device passcode was wrong (a wrong passcode
        /// counts toward the TPM's dictionary-attack lockout).
        public static let authenticationFailed = Code(rawValue: -1)
        /// The person dismissed the prompt (keychain calls: ``KeychainError/Code-swift.struct/userCanceled``).
        public static let userCancel = Code(rawValue: -2)
        /// The person chose the passcode instead of biometry; where the item or policy allows
        /// the passcode, the context then asks for it.
        public static let userFallback = Code(rawValue: -3)
        /// The system ended the verification (fprintd: no finger within the timeout).
        public static let systemCancel = Code(rawValue: -4)
        /// The device passcode is needed and none is set, or the context has no ``PasscodeSource``.
        public static let passcodeNotSet = Code(rawValue: -5)
        /// There is no authenticator, it cannot be reached (no reader, fprintd not running), or
        /// the device's state cannot be read.
        public static let biometryNotAvailable = Code(rawValue: -6)
        /// Biometry is needed and nothing is enrolled.
        public static let biometryNotEnrolled = Code(rawValue: -7)
        /// Too many failed attempts: biometry is locked out, or the TPM's dictionary-attack
        /// lockout refused the passcode.
        public static let biometryLockout = Code(rawValue: -8)
        /// The application cancelled: ``AuthenticationContext/invalidate()`` or
        /// ``Authenticator/cancel()`` during a verification.
        public static let appCancel = Code(rawValue: -9)
        /// The context was invalidated before this evaluation.
        public static let invalidContext = Code(rawValue: -10)
        /// Authenticating needs a person and ``AuthenticationContext/interactionNotAllowed`` is set.
        public static let notInteractive = Code(rawValue: -1004)

        /// The code's name (`userCancel`), or `LAError(<raw value>)` for a value without one.
        public var description: String {
            let names: [Int: String] = [
                -1: "authenticationFailed", -2: "userCancel", -3: "userFallback", -4: "systemCancel",
                -5: "passcodeNotSet", -6: "biometryNotAvailable", -7: "biometryNotEnrolled",
                -8: "biometryLockout", -9: "appCancel", -10: "invalidContext", -1004: "notInteractive",
            ]
            return names[rawValue] ?? "LAError(\(rawValue))"
        }
    }

    /// What a caller acts on.
    public let code: Code
    /// What happened, for people; never contains a secret.
    public let message: String

    /// An error with a code and a message for people.
    ///
    /// - Parameters:
    ///   - code: what a caller acts on.
    ///   - message: a sentence for people, without secrets.
    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    /// The message, followed by the code's name in parentheses.
    public var description: String { "\(message) (\(code))" }
}

extension KeychainError {
    /// An authentication failure as a keychain operation reports it (the status iOS gives:
    /// errSecUserCanceled, errSecInteractionNotAllowed, errSecAuthFailed, ...).
    package init(_ error: AuthenticationError) {
        let code: KeychainError.Code
        switch error.code {
        case .userCancel, .appCancel, .systemCancel: code = .userCanceled
        case .notInteractive, .invalidContext: code = .interactionNotAllowed
        case .biometryLockout: code = .lockout
        case .biometryNotEnrolled: code = .biometryNotEnrolled
        case .biometryNotAvailable: code = .notAvailable
        case .passcodeNotSet: code = .passcodeNotSet
        default: code = .authenticationFailed
        }
        self.init(code, error.message, underlying: error)
    }
}

/// The kind of biometry an authenticator offers (LABiometryType).
public enum BiometryType: Sendable, Hashable, Codable {
    case none
    case touchID
    case faceID
}

/// What an authenticator has enrolled, as far as it can tell.
public struct Enrollment: Sendable, Hashable {
    /// The kind of biometry.
    public let biometryType: BiometryType
    /// Opaque bytes that change with every change of the enrolled set (a finger or face added,
    /// removed, enrolled again) and never come back: `biometryCurrentSet` items are bound to it.
    public let identifier: [UInt8]

    public init(biometryType: BiometryType, identifier: [UInt8]) {
        self.biometryType = biometryType
        self.identifier = identifier
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
        public let rawValue: Int
        public init(rawValue: Int) { self.rawValue = rawValue }

        public static let authenticationFailed = Code(rawValue: -1)
        public static let userCancel = Code(rawValue: -2)
        public static let userFallback = Code(rawValue: -3)
        public static let systemCancel = Code(rawValue: -4)
        public static let passcodeNotSet = Code(rawValue: -5)
        public static let biometryNotAvailable = Code(rawValue: -6)
        public static let biometryNotEnrolled = Code(rawValue: -7)
        public static let biometryLockout = Code(rawValue: -8)
        public static let appCancel = Code(rawValue: -9)
        public static let invalidContext = Code(rawValue: -10)
        public static let notInteractive = Code(rawValue: -1004)

        public var description: String {
            let names: [Int: String] = [-1: "authenticationFailed", -2: "userCancel", -3: "userFallback", -4: "systemCancel",
                                        -5: "passcodeNotSet", -6: "biometryNotAvailable", -7: "biometryNotEnrolled",
                                        -8: "biometryLockout", -9: "appCancel", -10: "invalidContext", -1004: "notInteractive"]
            return names[rawValue] ?? "LAError(\(rawValue))"
        }
    }

    public let code: Code
    public let message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

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

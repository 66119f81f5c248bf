// swift-format-ignore-file: AlwaysUseLowerCamelCase
// Apple's names, kept as Apple spells them so that ported code compiles unchanged.

// LocalAuthentication's surface over TPMKeychain's AuthenticationContext, so that iOS code using
// LAContext compiles and runs with `import LocalAuthentication` rewritten to
// `import LocalAuthenticationCompat`. The authenticator, passcode source and application
// identifier come from TPMKeychain's KeychainEnvironment.

@_exported import Foundation
import SystemCalls
public import TPMKeychain

/// LAPolicy, with Apple's raw values.
public enum LAPolicy: Int, Sendable {
    case deviceOwnerAuthenticationWithBiometrics = 1
    case deviceOwnerAuthentication = 2
    case deviceOwnerAuthenticationWithWatch = 3
    case deviceOwnerAuthenticationWithBiometricsOrWatch = 4
    case deviceOwnerAuthenticationWithWristDetection = 5
}

/// LABiometryType, with Apple's raw values.
public enum LABiometryType: Int, Sendable {
    case none = 0
    case touchID = 1
    case faceID = 2
    case opticID = 4
}

/// "com.apple.LocalAuthentication", the domain of LAError's NSErrors.
public let LAErrorDomain = "com.apple.LocalAuthentication"

/// LAError, with Apple's codes: `catch let error as LAError { switch error.code { ... } }` and
/// `catch LAError.userCancel` work as on iOS.
public struct LAError: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Code: Int, Sendable {
        case authenticationFailed = -1
        case userCancel = -2
        case userFallback = -3
        case systemCancel = -4
        case passcodeNotSet = -5
        case biometryNotAvailable = -6
        case biometryNotEnrolled = -7
        case biometryLockout = -8
        case appCancel = -9
        case invalidContext = -10
        case companionNotAvailable = -11
        case biometryNotPaired = -12
        case biometryDisconnected = -13
        case invalidDimensions = -14
        case notInteractive = -1004

        public static let watchNotAvailable = Code.companionNotAvailable
        public static let touchIDNotAvailable = Code.biometryNotAvailable
        public static let touchIDNotEnrolled = Code.biometryNotEnrolled
        public static let touchIDLockout = Code.biometryLockout

        /// `catch LAError.userCancel`.
        public static func ~= (match: Code, error: any Error) -> Bool {
            (error as? LAError)?.code == match
        }
    }

    public let code: Code
    public let message: String

    public init(_ code: Code, _ message: String = "") {
        self.code = code
        self.message = message
    }

    public static var errorDomain: String { LAErrorDomain }
    public var errorCode: Int { code.rawValue }
    public var localizedDescription: String { message }
    public var description: String { "LAError(\(code)): \(message)" }

    public static let authenticationFailed = Code.authenticationFailed
    public static let userCancel = Code.userCancel
    public static let userFallback = Code.userFallback
    public static let systemCancel = Code.systemCancel
    public static let passcodeNotSet = Code.passcodeNotSet
    public static let biometryNotAvailable = Code.biometryNotAvailable
    public static let biometryNotEnrolled = Code.biometryNotEnrolled
    public static let biometryLockout = Code.biometryLockout
    public static let appCancel = Code.appCancel
    public static let invalidContext = Code.invalidContext
    public static let notInteractive = Code.notInteractive

    init(_ error: AuthenticationError) {
        self.init(Code(rawValue: error.code.rawValue) ?? .authenticationFailed, error.message)
    }

    /// As iOS hands it to `canEvaluatePolicy(_:error:)` and `reply`: an NSError in LAErrorDomain.
    var nsError: NSError {
        NSError(domain: LAErrorDomain, code: code.rawValue, userInfo: [NSLocalizedDescriptionKey: message])
    }
}

/// An NSError in LAErrorDomain casts to LAError (`error as? LAError`, `catch let error as LAError`),
/// as Apple's bridged error types do: the NSError that `canEvaluatePolicy(_:error:)` leaves in its
/// out-parameter reads back as the struct iOS code switches over.
extension LAError: _ObjectiveCBridgeable {
    public func _bridgeToObjectiveC() -> NSError { nsError }

    public static func _forceBridgeFromObjectiveC(_ source: NSError, result: inout LAError?) {
        result = LAError(bridging: source)
    }

    public static func _conditionallyBridgeFromObjectiveC(_ source: NSError, result: inout LAError?) -> Bool {
        guard source.domain == LAErrorDomain, Code(rawValue: source.code) != nil else { return false }
        result = LAError(bridging: source)
        return true
    }

    public static func _unconditionallyBridgeFromObjectiveC(_ source: NSError?) -> LAError {
        source.map(LAError.init(bridging:)) ?? LAError(.authenticationFailed)
    }

    private init(bridging error: NSError) {
        self.init(
            Code(rawValue: error.code) ?? .authenticationFailed,
            error.userInfo[NSLocalizedDescriptionKey] as? String ?? "")
    }
}

/// LADomainState (iOS 18): the enrolled biometry's state.
public struct LADomainState: Sendable {
    public struct Biometry: Sendable {
        /// Changes whenever the enrolled set changes; nil when nothing is enrolled; differs between applications.
        public let stateHash: Data?
    }

    public let biometry: Biometry
}

/// LAContext over an AuthenticationContext: the authenticator and passcode source of
/// `KeychainEnvironment`, its application identifier (which scopes the domain state) and store.
/// Pass it as kSecUseAuthenticationContext.
open class LAContext: NSObject, AuthenticationContextProviding, @unchecked Sendable {
    public let authenticationContext: AuthenticationContext
    private let titles = Locked<(fallback: String?, cancel: String?)>((nil, nil))
    private let evaluatedEnrollment = Locked<Data?>(nil)

    public override init() {
        authenticationContext = KeychainEnvironment.makeContext()
        super.init()
    }

    /// A context over one you made (tests, a chosen authenticator).
    public init(_ context: AuthenticationContext) {
        authenticationContext = context
        super.init()
    }

    open var localizedReason: String {
        get { authenticationContext.localizedReason }
        set { authenticationContext.localizedReason = newValue }
    }

    open var localizedFallbackTitle: String? {
        get { titles.withLock { $0.fallback } }
        set { titles.withLock { $0.fallback = newValue } }
    }

    open var localizedCancelTitle: String? {
        get { titles.withLock { $0.cancel } }
        set { titles.withLock { $0.cancel = newValue } }
    }

    open var interactionNotAllowed: Bool {
        get { authenticationContext.interactionNotAllowed }
        set { authenticationContext.interactionNotAllowed = newValue }
    }

    /// Seconds a success is reused (capped at ``LATouchIDAuthenticationMaximumAllowableReuseDuration``).
    open var touchIDAuthenticationAllowableReuseDuration: TimeInterval {
        get {
            let components = authenticationContext.allowableReuseDuration.components
            return Double(components.seconds) + Double(components.attoseconds) / 1e18
        }
        set { authenticationContext.allowableReuseDuration = .milliseconds(Int64(max(0, newValue) * 1000)) }
    }

    /// The kind of biometry the authenticator offers (.none without one).
    open var biometryType: LABiometryType {
        switch authenticationContext.authenticator?.biometryType {
        case .touchID?: .touchID
        case .faceID?: .faceID
        default: .none
        }
    }

    /// The enrolled biometry's state after a successful ``canEvaluatePolicy(_:error:)`` or
    /// evaluation: changes whenever the enrollment changes, differs between applications.
    open var evaluatedPolicyDomainState: Data? {
        evaluatedEnrollment.withLock { $0 }
    }

    open var domainState: LADomainState {
        LADomainState(
            biometry: LADomainState.Biometry(stateHash: Self.waiting { await self.authenticationContext.domainState() })
        )
    }

    open func canEvaluatePolicy(_ policy: LAPolicy, error errorPointer: UnsafeMutablePointer<NSError?>?) -> Bool {
        do throws(LAError) {
            let mapped = try Self.policy(policy)
            try Self.waiting { () async throws(AuthenticationError) in
                try await self.authenticationContext.canEvaluate(mapped)
            }
            recordDomainState()
            return true
        } catch {
            errorPointer?.pointee = error.nsError
            return false
        }
    }

    open func evaluatePolicy(
        _ policy: LAPolicy, localizedReason: String, reply: @escaping @Sendable (Bool, (any Error)?) -> Void
    ) {
        Task {
            do {
                _ = try await evaluatePolicy(policy, localizedReason: localizedReason)
                reply(true, nil)
            } catch {
                reply(false, error)
            }
        }
    }

    open func evaluatePolicy(_ policy: LAPolicy, localizedReason: String) async throws -> Bool {
        let mapped = try Self.policy(policy)
        do {
            try await authenticationContext.evaluate(mapped, reason: localizedReason)
        } catch {
            throw LAError(error)
        }
        recordDomainState()
        return true
    }

    open func invalidate() {
        authenticationContext.invalidate()
    }

    private func recordDomainState() {
        let state = Self.waiting { await self.authenticationContext.domainState() }
        evaluatedEnrollment.withLock { $0 = state }
    }

    private static func policy(_ policy: LAPolicy) throws(LAError) -> AuthenticationPolicy {
        switch policy {
        case .deviceOwnerAuthenticationWithBiometrics: .deviceOwnerAuthenticationWithBiometrics
        case .deviceOwnerAuthentication: .deviceOwnerAuthentication
        default: throw LAError(.companionNotAvailable, "Linux has no paired watch")
        }
    }

    /// Runs async work from a synchronous member and waits for it on a queue of its own.
    private static func waiting<R: Sendable>(_ body: @escaping @Sendable () async -> R) -> R {
        SynchronousWait.run(body)
    }

    private static func waiting(
        _ body: @escaping @Sendable () async throws(AuthenticationError) -> Void
    ) throws(LAError) {
        let failure: AuthenticationError? = waiting { () async -> AuthenticationError? in
            do throws(AuthenticationError) {
                try await body()
                return nil
            } catch {
                return error
            }
        }
        if let failure { throw LAError(failure) }
    }
}

/// The longest reuse window (seconds).
public let LATouchIDAuthenticationMaximumAllowableReuseDuration: TimeInterval = 300

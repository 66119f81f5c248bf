import Crypto
public import Foundation
package import KeychainStore
import SystemCalls
public import TPM
package import KeychainVocabulary

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
            guard let passcode = await prompt(reason) else { throw AuthenticationError(.userCancel, "The passcode prompt was cancelled") }
            return SecretBytes(copying: Array(passcode.utf8))
        }
    }

    /// Asks `prompt` with the reason for the passcode's bytes; nil means the person cancelled.
    public static func secret(_ prompt: @escaping @Sendable (_ reason: String) async -> SecretBytes?) -> PasscodeSource {
        PasscodeSource { (reason) throws(AuthenticationError) in
            guard let passcode = await prompt(reason) else { throw AuthenticationError(.userCancel, "The passcode prompt was cancelled") }
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

    private struct State {
        var reason = ""
        var interactionNotAllowed = false
        var reuse: Duration = .zero
        var invalidated = false
        var evaluating = false
        /// Opened key records, with when they were opened, the TPM's startup epoch and the
        /// device's lock stamp then.
        var recordKeys: [[UInt8]: KeptKey] = [:]
        /// When the TPM's startup epoch was last confirmed unchanged.
        var epochCheckedAt: ContinuousClock.Instant?
        /// The last biometric match: when, and against which enrollment.
        var match: (at: ContinuousClock.Instant, enrollment: Enrollment)?
        var prompts = 0
    }

    private let state = Locked(State())

    /// A record key kept for the reuse window, with what ends it.
    private struct KeptKey {
        let key: ItemStore.RecordKey
        let at: ContinuousClock.Instant
        let epoch: UInt64
        let lockStamp: [Int64]?
        let device: Device
    }

    /// How stale the TPM-reset check of a reuse window may be: the TPM's reset count is read at
    /// most this often (a TPM round trip would cost more than the read it saves).
    public static let resetCheckInterval: Duration = .seconds(1)

    /// A context that asks `authenticator` for biometry and `passcode` for the device passcode.
    /// Nothing is asked until an evaluation or a protected read needs it.
    ///
    /// - Parameters:
    ///   - authenticator: a biometric authenticator, or nil for none.
    ///   - passcode: how to get the device passcode, or nil when this context cannot.
    ///   - applicationIdentifier: scopes ``domainState()``; nil for the process name.
    ///   - location: the store whose device a passcode evaluation checks.
    public init(authenticator: (any Authenticator)? = nil, passcode: PasscodeSource? = nil,
                applicationIdentifier: String? = nil, location: KeychainLocation = .default) {
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
            state.recordKeys = [:]
            state.match = nil
            return state.evaluating
        }
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
            guard authenticator != nil else { throw AuthenticationError(.biometryNotAvailable, "No biometric authenticator") }
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
            try Devices.with(location) { (device) throws(KeychainError) in
                try device.unlock(passcode: passcode)
            }
        } catch {
            throw AuthenticationError(error.code == .lockout ? .biometryLockout : .authenticationFailed, error.message)
        }
    }

    /// The enrollment's state hash for this application (LADomainState.biometry.stateHash): nil
    /// when nothing is enrolled; changes with every enrollment change; differs between
    /// applications.
    public func domainState() async -> Data? {
        guard let authenticator, let enrolled = try? await authenticator.enrollment() else { return nil }
        let mac = HMAC<SHA256>.authenticationCode(for: enrolled.identifier, using: SymmetricKey(data: Array(applicationIdentifier.utf8)))
        return Data(mac)
    }

    // MARK: Opening records for the Keychain API

    /// The opened key record for a protected item: from the reuse window, or by asking the
    /// person (biometry, then the passcode where the protection allows it) and the TPM.
    package func recordKey(for protection: ItemStore.ItemProtection, store: ItemStore, location: KeychainLocation) async throws(KeychainError)
        -> ItemStore.RecordKey {
        try mapAuthentication { () throws(AuthenticationError) in try checkValid() }
        if let cached = keptKey(protection, location: location) { return cached }
        let needs = protection.protection
        let reason = localizedReason
        if location.sessionIsLocked(for: needs.accessibility) {
            throw KeychainError(.interactionNotAllowed, "The login session is locked: whenUnlocked items cannot be read until it is unlocked")
        }
        if protection.lockBound {
            // A locked device fails at once, as iOS does, without asking anyone.
            let unlocked = try Devices.with(location) { (device) throws(KeychainError) in
                try device.lockSatisfies(needs.accessibility.lockRequirement)
            }
            guard unlocked else {
                throw KeychainError(.interactionNotAllowed, "The keychain is locked: unlock it with the device passcode")
            }
        }
        var proof: ItemStore.BiometryProof?
        var passcode: SecretBytes?
        if needs.biometry != nil {
            proof = try await mapAuthentication { () async throws(AuthenticationError) -> ItemStore.BiometryProof? in
                guard let authenticator else {
                    if needs.passcode && needs.eitherSuffices { return nil }
                    throw AuthenticationError(.biometryNotAvailable, "The item needs biometry and this context has no authenticator")
                }
                let enrollment: Enrollment?
                do throws(AuthenticationError) {
                    enrollment = try await authenticator.enrollment()
                } catch where error.code == .biometryNotAvailable && needs.passcode && needs.eitherSuffices {
                    // No reader (or no fprintd): the passcode is the other way in, as on iOS.
                    return nil
                }
                guard let enrolled = enrollment else {
                    if needs.passcode && needs.eitherSuffices { return nil }
                    throw AuthenticationError(.biometryNotEnrolled, "The item needs biometry and nothing is enrolled")
                }
                do throws(AuthenticationError) {
                    return ItemStore.BiometryProof(enrollmentIdentifier: try await biometricMatch(authenticator, enrolled: enrolled, reason: reason).identifier)
                } catch let error where error.code == .userFallback && needs.passcode && needs.eitherSuffices {
                    return nil
                }
            }
        }
        if needs.passcode && (proof == nil || needs.needsBothProtectors) {
            passcode = try await mapAuthentication { () async throws(AuthenticationError) in try await obtainPasscode(reason: reason) }
        }
        let recordID = protection.recordID
        do throws(KeychainError) {
            return remember(try open(recordID, store: store, location: location, proof: proof, passcode: passcode))
        } catch let error where error.code == .biometryInvalidated {
            // The enrollment changed, and the passcode still opens this item.
            passcode = try await mapAuthentication { () async throws(AuthenticationError) in try await obtainPasscode(reason: reason) }
            return remember(try open(recordID, store: store, location: location, proof: nil, passcode: passcode))
        }
    }

    private func open(_ recordID: [UInt8], store: ItemStore, location: KeychainLocation, proof: ItemStore.BiometryProof?,
                      passcode: SecretBytes?) throws(KeychainError) -> KeptKey {
        try Devices.with(location) { (device) throws(KeychainError) in
            let keeps = state.withLock { $0.reuse > .zero }
            let key = try store.openRecord(recordID, device: device, biometry: proof, passcode: passcode, withStartupEpoch: keeps)
            return KeptKey(key: key, at: .now, epoch: key.startupEpoch ?? 0, lockStamp: device.lockStamp(), device: device)
        }
    }

    private func remember(_ kept: KeptKey) -> ItemStore.RecordKey {
        state.withLock { state in
            if state.reuse > .zero {
                state.recordKeys[kept.key.recordID] = kept
                state.epochCheckedAt = kept.at
            }
        }
        return kept.key
    }

    /// A key opened within the reuse window, while the device was neither locked nor unlocked
    /// since (one stat of its lock stamp) and the TPM has not reset (its reset and restart counts,
    /// read at most every ``resetCheckInterval``).
    package func keptKey(_ protection: ItemStore.ItemProtection, location: KeychainLocation) -> ItemStore.RecordKey? {
        guard !state.withLock({ $0.invalidated }) else { return nil }
        guard !location.sessionIsLocked(for: protection.protection.accessibility) else {
            // The screen is locked: forget what this context kept, as iOS evicts class keys.
            state.withLock { state in
                state.recordKeys.removeAll()
                state.match = nil
            }
            return nil
        }
        let recordID = protection.recordID
        let (cached, window, checkedAt) = state.withLock { ($0.recordKeys[recordID], $0.reuse, $0.epochCheckedAt) }
        guard let cached else { return nil }
        var valid = ContinuousClock.now - cached.at <= window && cached.device.lockStamp() == cached.lockStamp
        if valid, checkedAt.map({ ContinuousClock.now - $0 > Self.resetCheckInterval }) ?? true {
            valid = (try? Devices.with(location) { (device) throws(KeychainError) in try startupEpoch(device) }) == cached.epoch
            if valid { state.withLock { $0.epochCheckedAt = .now } }
        }
        guard valid else {
            // Expired, locked or unlocked, or the TPM reset: the person authenticates again.
            state.withLock { state in
                state.recordKeys.removeValue(forKey: recordID)
                state.match = nil
            }
            return nil
        }
        return cached.key
    }

    private func startupEpoch(_ device: Device) throws(KeychainError) -> UInt64 {
        do {
            let connection = try TPMConnection(device.tpm)
            defer { connection.close() }
            return try connection.startupEpoch()
        } catch {
            throw KeychainError(deviceTPM: error)
        }
    }

    /// A biometric match, reused within the window for the same enrollment.
    private func biometricMatch(_ authenticator: any Authenticator, enrolled: Enrollment,
                                reason: String) async throws(AuthenticationError) -> Enrollment {
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

    private func obtainPasscode(reason: String) async throws(AuthenticationError) -> SecretBytes {
        guard let passcode else {
            throw AuthenticationError(.passcodeNotSet, "The item needs the device passcode and this context has no way to ask for it")
        }
        try beginPrompt()
        defer { state.withLock { $0.evaluating = false } }
        return try await passcode.obtain(reason.isEmpty ? "access the keychain" : reason)
    }

    private func beginPrompt() throws(AuthenticationError) {
        try state.withLock { (state) throws(AuthenticationError) in
            guard !state.invalidated else { throw AuthenticationError(.invalidContext, "The context was invalidated") }
            guard !state.interactionNotAllowed else {
                throw AuthenticationError(.notInteractive, "Authentication needs a person and the context does not allow interaction")
            }
            state.evaluating = true
            state.prompts += 1
        }
    }

    private func checkValid() throws(AuthenticationError) {
        if state.withLock({ $0.invalidated }) {
            throw AuthenticationError(.invalidContext, "The context was invalidated")
        }
    }

    private func passcodeIsSet() throws(AuthenticationError) -> Bool {
        do {
            return try Devices.with(location) { (device) throws(KeychainError) in
                try device.passcodeIsSet()
            }
        } catch {
            throw AuthenticationError(.biometryNotAvailable, error.message)
        }
    }

    private func mapAuthentication<R>(_ body: () async throws(AuthenticationError) -> R) async throws(KeychainError) -> R {
        do {
            return try await body()
        } catch {
            throw KeychainError(error)
        }
    }

    private func mapAuthentication<R>(_ body: () throws(AuthenticationError) -> R) throws(KeychainError) -> R {
        do {
            return try body()
        } catch {
            throw KeychainError(error)
        }
    }
}

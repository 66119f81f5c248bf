import Crypto
import FoundationEssentials
import KeychainStore
import KeychainVocabulary
import SystemCalls
package import TPM

/// What the service needs of an authentication context to open a protected item's key record:
/// a person asked (biometry, the passcode) and a place to keep opened keys for the reuse window.
/// `AuthenticationContext` is the conformer; it holds ``OpenedRecords``, never an engine type.
package protocol ProofSource: AnyObject, Sendable {
    /// The biometric authenticator, if any.
    var authenticator: (any Authenticator)? { get }
    /// What the person is told.
    var localizedReason: String { get }
    /// How long an opened key is kept (zero: not at all).
    var allowableReuseDuration: Duration { get }
    /// The keys this context opened, kept for its reuse window.
    var openedRecords: OpenedRecords { get }
    /// Throws when the context was invalidated.
    func checkValid() throws(AuthenticationError)
    /// A biometric match against `enrolled`, reused within the window.
    func biometricMatch(
        _ authenticator: any Authenticator, enrolled: Enrollment, reason: String
    )
        async throws(AuthenticationError) -> Enrollment
    /// The device passcode, asked of the person.
    func obtainPasscode(reason: String) async throws(AuthenticationError) -> SecretBytes
    /// Forgets the last biometric match: the window it was reused in ended.
    func forgetMatch()
}

/// Key records a context opened, with when they were opened, the TPM's startup epoch and the
/// device's lock stamp then; and when the TPM's startup epoch was last confirmed unchanged.
/// Opaque above the service.
package final class OpenedRecords: Sendable {
    struct State {
        var keys: [[UInt8]: KeptKey] = [:]
        var epochCheckedAt: ContinuousClock.Instant?
    }

    /// A record key kept for the reuse window, with what ends it.
    struct KeptKey {
        let key: ItemStore.RecordKey
        let at: ContinuousClock.Instant
        let epoch: UInt64
        let lockStamp: Device.LockStamp?
        let device: Device
    }

    let state = Locked(State())

    /// How stale the TPM-reset check of a reuse window may be: the TPM's reset count is read at
    /// most this often (a TPM round trip would cost more than the read it saves).
    package static let resetCheckInterval: Duration = .seconds(1)

    package init() {}

    /// Forgets every kept key (the context was invalidated, or the session locked).
    package func removeAll() {
        state.withLock { $0.keys.removeAll() }
    }

    /// How many keys are kept: for tests of the reuse window.
    package var count: Int { state.withLock { $0.keys.count } }
}

extension ProofSource {
    /// The opened key record for a protected item: from the reuse window, or by asking the
    /// person (biometry, then the passcode where the protection allows it) and the TPM.
    func recordKey(
        for protection: ItemStore.ItemProtection, store: ItemStore, location: KeychainLocation
    ) async throws(KeychainError)
        -> ItemStore.RecordKey
    {
        do { try checkValid() } catch { throw KeychainError(error) }
        if let cached = keptKey(protection, location: location) { return cached }
        let needs = protection.protection
        let reason = localizedReason
        if location.sessionIsLocked(for: needs.accessibility) {
            throw KeychainError(
                .interactionNotAllowed,
                "The login session is locked: whenUnlocked items cannot be read until it is unlocked")
        }
        if protection.lockBound {
            // A locked device fails at once, as iOS does, without asking anyone.
            let unlocked = try Devices.with(location) { (device) throws(KeychainError) in
                try device.lockSatisfies(needs.accessibility.lockRequirement)
            }
            guard unlocked else {
                throw KeychainError(
                    .interactionNotAllowed, "The keychain is locked: unlock it with the device passcode")
            }
        }
        var proof: ItemStore.BiometryProof?
        var passcode: SecretBytes?
        var invalidatedByEnrollment = false
        if needs.biometry != nil {
            proof = try await mapAuthentication { () async throws(AuthenticationError) -> ItemStore.BiometryProof? in
                guard let authenticator else {
                    if needs.passcode && needs.eitherSuffices { return nil }
                    throw AuthenticationError(
                        .biometryNotAvailable, "The item needs biometry and this context has no authenticator")
                }
                let enrollment: Enrollment?
                do throws(AuthenticationError) {
                    enrollment = try await authenticator.enrollment()
                } catch  where error.code == .biometryNotAvailable && needs.passcode && needs.eitherSuffices {
                    // No reader (or no fprintd): the passcode is the other way in, as on iOS.
                    return nil
                }
                guard let enrolled = enrollment else {
                    if needs.passcode && needs.eitherSuffices { return nil }
                    throw AuthenticationError(.biometryNotEnrolled, "The item needs biometry and nothing is enrolled")
                }
                // An item the enrollment change has invalidated is not worth a match.
                if needs.biometry == .currentSet,
                    (try? Devices.with(location) { (device) throws(KeychainError) in
                        try store.enrollmentChangeInvalidates(
                            protection.recordID, enrollmentIdentifier: enrolled.identifier, device: device)
                    }) == true
                {
                    invalidatedByEnrollment = true
                    return nil
                }
                do throws(AuthenticationError) {
                    return ItemStore.BiometryProof(
                        enrollmentIdentifier: try await biometricMatch(
                            authenticator, enrolled: enrolled, reason: reason
                        ).identifier)
                } catch let error where error.code == .userFallback && needs.passcode && needs.eitherSuffices {
                    return nil
                }
            }
        }
        if invalidatedByEnrollment && !(needs.passcode && needs.eitherSuffices) {
            throw KeychainError(
                .itemInvalidated,
                "The biometric enrollment changed since the item was added, so it can never be read again (as on iOS); nobody was asked to match"
            )
        }
        if needs.passcode && (proof == nil || needs.needsBothProtectors) {
            passcode = try await mapAuthentication { () async throws(AuthenticationError) in
                try await obtainPasscode(reason: reason)
            }
        }
        let recordID = protection.recordID
        do throws(KeychainError) {
            return remember(try open(recordID, store: store, location: location, proof: proof, passcode: passcode))
        } catch let error where error.code == .biometryInvalidated {
            // The enrollment changed, and the passcode still opens this item.
            passcode = try await mapAuthentication { () async throws(AuthenticationError) in
                try await obtainPasscode(reason: reason)
            }
            return remember(try open(recordID, store: store, location: location, proof: nil, passcode: passcode))
        }
    }

    /// Opens `recordID` with the TPM, given the proofs.
    func open(
        _ recordID: [UInt8], store: ItemStore, location: KeychainLocation, proof: ItemStore.BiometryProof?,
        passcode: SecretBytes?
    ) throws(KeychainError) -> OpenedRecords.KeptKey {
        try Devices.with(location) { (device) throws(KeychainError) in
            let keeps = allowableReuseDuration > .zero
            // Read before the unseal, so never later than the epoch the key is opened in.
            let known = StartupEpochs.last(for: device.tpm.tcti)
            let key = try store.openRecord(
                recordID, device: device, biometry: proof, passcode: passcode, withStartupEpoch: keeps && known == nil)
            if let read = key.startupEpoch { StartupEpochs.record(read, for: device.tpm.tcti) }
            // A key that is not kept never has its window checked: no stat of the lock stamp.
            return OpenedRecords.KeptKey(
                key: key, at: .now, epoch: key.startupEpoch ?? known ?? 0, lockStamp: keeps ? device.lockStamp() : nil,
                device: device)
        }
    }

    func remember(_ kept: OpenedRecords.KeptKey) -> ItemStore.RecordKey {
        guard allowableReuseDuration > .zero else { return kept.key }
        openedRecords.state.withLock { state in
            state.keys[kept.key.recordID] = kept
            state.epochCheckedAt = kept.at
        }
        return kept.key
    }

    /// A key opened within the reuse window, while the device was neither locked nor unlocked
    /// since (one stat of its lock stamp) and the TPM has not reset (its reset and restart counts,
    /// read at most every ``OpenedRecords/resetCheckInterval``).
    func keptKey(_ protection: ItemStore.ItemProtection, location: KeychainLocation) -> ItemStore.RecordKey? {
        guard (try? checkValid()) != nil else { return nil }
        let opened = openedRecords
        guard !location.sessionIsLocked(for: protection.protection.accessibility) else {
            // The screen is locked: forget what this context kept, as iOS evicts class keys.
            opened.removeAll()
            forgetMatch()
            return nil
        }
        let recordID = protection.recordID
        let window = allowableReuseDuration
        let (cached, checkedAt) = opened.state.withLock { ($0.keys[recordID], $0.epochCheckedAt) }
        guard let cached else { return nil }
        var valid = ContinuousClock.now - cached.at <= window && cached.device.lockStamp() == cached.lockStamp
        if valid, checkedAt.map({ ContinuousClock.now - $0 > OpenedRecords.resetCheckInterval }) ?? true {
            valid =
                (try? Devices.with(location) { (device) throws(KeychainError) in try startupEpoch(device) })
                == cached.epoch
            if valid { opened.state.withLock { $0.epochCheckedAt = .now } }
        }
        guard valid else {
            // Expired, locked or unlocked, or the TPM reset: the person authenticates again.
            _ = opened.state.withLock { $0.keys.removeValue(forKey: recordID) }
            forgetMatch()
            return nil
        }
        return cached.key
    }

    func startupEpoch(_ device: Device) throws(KeychainError) -> UInt64 {
        do {
            let connection = try TPMConnection(device.tpm)
            defer { connection.close() }
            let epoch = try connection.startupEpoch()
            StartupEpochs.record(epoch, for: device.tpm.tcti)
            return epoch
        } catch {
            throw KeychainError(deviceTPM: error)
        }
    }

    func mapAuthentication<R>(
        _ body: () async throws(AuthenticationError) -> R
    ) async throws(KeychainError) -> R {
        do {
            return try await body()
        } catch {
            throw KeychainError(error)
        }
    }
}

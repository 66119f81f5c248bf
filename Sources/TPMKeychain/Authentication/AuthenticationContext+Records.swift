import Crypto
import FoundationEssentials
package import KeychainStore
package import KeychainVocabulary
import SystemCalls
import TPM

// Opening protected items' key records: asking the person and the TPM, and keeping opened keys
// for the reuse window.
extension AuthenticationContext {
    /// The opened key record for a protected item: from the reuse window, or by asking the
    /// person (biometry, then the passcode where the protection allows it) and the TPM.
    package func recordKey(
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

    func open(
        _ recordID: [UInt8], store: ItemStore, location: KeychainLocation, proof: ItemStore.BiometryProof?,
        passcode: SecretBytes?
    ) throws(KeychainError) -> KeptKey {
        try Devices.with(location) { (device) throws(KeychainError) in
            let keeps = state.withLock { $0.reuse > .zero }
            // Read before the unseal, so never later than the epoch the key is opened in.
            let known = StartupEpochs.last(for: device.tpm.tcti)
            let key = try store.openRecord(
                recordID, device: device, biometry: proof, passcode: passcode, withStartupEpoch: keeps && known == nil)
            if let read = key.startupEpoch { StartupEpochs.record(read, for: device.tpm.tcti) }
            // A key that is not kept never has its window checked: no stat of the lock stamp.
            return KeptKey(
                key: key, at: .now, epoch: key.startupEpoch ?? known ?? 0, lockStamp: keeps ? device.lockStamp() : nil,
                device: device)
        }
    }

    func remember(_ kept: KeptKey) -> ItemStore.RecordKey {
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
            valid =
                (try? Devices.with(location) { (device) throws(KeychainError) in try startupEpoch(device) })
                == cached.epoch
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

    /// A biometric match, reused within the window for the same enrollment.
    func biometricMatch(
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

    func obtainPasscode(reason: String) async throws(AuthenticationError) -> SecretBytes {
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

    func checkValid() throws(AuthenticationError) {
        if state.withLock({ $0.invalidated }) {
            throw AuthenticationError(.invalidContext, "The context was invalidated")
        }
    }

    func passcodeIsSet() throws(AuthenticationError) -> Bool {
        do {
            return try Devices.with(location) { (device) throws(KeychainError) in
                try device.passcodeIsSet()
            }
        } catch {
            throw AuthenticationError(.biometryNotAvailable, error.message)
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

import Crypto
import FoundationEssentials
package import KeychainVocabulary
import SystemCalls
package import TPM

// The device passcode: set, change and remove it, the passcode key sealed under it, and
// unlocking and locking with it.
extension Device {
    /// Keeps a copy of the passcode key outside the TPM, for ``reestablishPasscode(seed:deviceBase:newPasscode:)``:
    /// given the key's seed, its public half and the device's NV base, before the device's state
    /// names the key. A failure stops the change that would have named it.
    package typealias PasscodeEscrow = (SecretBytes, [UInt8], UInt32) throws(KeychainError) -> Void

    /// Sets the first passcode.
    ///
    /// - Parameter escrow: given the new passcode key before it is made the device's.
    /// - Throws: ``KeychainError`` `.duplicateItem` when one is set (change it instead), `.invalidParameter`.
    package func setPasscode(_ passcode: SecretBytes, escrow: PasscodeEscrow? = nil) throws(KeychainError) {
        try Self.validate(passcode)
        try withDevice { (state, directory, connection) throws(KeychainError) in
            guard state.file.passcode == nil else {
                throw KeychainError(.duplicateItem, "A device passcode is already set; change it with the current one")
            }
            let epoch = try ensureCounter(state.indices.passcodeCounter, state, connection)
            let seed = try randomSeed(connection)
            state.file.passcode = try sealPasscodeKey(seed: seed, passcode: passcode, epoch: epoch, state, connection)
            try escrow?(seed, state.file.passcode?.publicKey ?? [], state.file.nvBase)
            try write(&state, as: DeviceFile.fileName, in: directory, connection)
            try writeLockState(unlocked: true, state, connection)
        }
    }

    /// 32 bytes from the operating system and the TPM together: a weak TPM generator alone does
    /// not decide the passcode key (as the master key is made).
    private func randomSeed(_ connection: TPMConnection) throws(KeychainError) -> SecretBytes {
        let fromTPM = try tpmCall { try connection.randomBytes(count: 32) }
        let fromSystem: SecretBytes
        do {
            fromSystem = try SecretBytes.random(count: 32)
        } catch {
            throw KeychainError(.storageFailed, "No randomness from the operating system", underlying: error)
        }
        // Both halves side by side in zeroized memory, never in an array.
        let material = fromSystem.withUnsafeBytes { system in
            fromTPM.withUnsafeBytes { tpm in KeyRecord.concatenated(system, tpm) }
        }
        let key = material.withUnsafeBytes {
            OneBlockHKDF.deriveKey(inputKeyMaterial: $0, info: Array("TPMKeychain passcode key seed".utf8)[...])
        }
        return key.withUnsafeBytes { SecretBytes(copying: $0) }
    }

    /// Changes the passcode: one sealed object is replaced, no item or key record is rewritten,
    /// and the passcode counter moves so that an old copy of the sealed key no longer opens.
    ///
    /// - Throws: ``KeychainError`` `.passcodeNotSet`, `.authenticationFailed` (wrong passcode, counted
    ///   by the TPM's dictionary-attack protection), `.lockout`.
    package func changePasscode(
        from old: SecretBytes, to new: SecretBytes, escrow: PasscodeEscrow? = nil
    ) throws(KeychainError) {
        try Self.validate(new)
        try replacePasscode(old) { (state, seed, epoch, connection) throws(KeychainError) in
            state.file.passcode = try sealPasscodeKey(seed: seed, passcode: new, epoch: epoch, state, connection)
            try escrow?(seed, state.file.passcode?.publicKey ?? [], state.file.nvBase)
        }
    }

    /// Makes the passcode work again after the TPM lost the device's passcode counter (someone
    /// with the owner hierarchy's authorization undefined it, review 3, N1), given the passcode
    /// key's seed from its escrow: the same key, sealed under `newPasscode`, so that every key
    /// record wrapped to it opens again. Indices someone else defined at the device's handles are
    /// deleted (with the owner's authorization, as theirs were), the device's own defined again
    /// there, with the names records expect; the lock state starts locked. A counter defined again
    /// starts above every value it had: biometryCurrentSet records bound to the old enrollment
    /// counter stay invalid, as after a re-enrollment.
    ///
    /// - Throws: ``KeychainError`` `.passcodeNotSet`; `.authenticationFailed` when `seed` is not the
    ///   device's passcode key; `.invalidParameter`; the TPM's errors.
    package func reestablishPasscode(
        seed: SecretBytes, deviceBase: UInt32, newPasscode: SecretBytes
    ) throws(KeychainError) {
        try Self.validate(newPasscode)
        try withDevice { (state, directory, connection) throws(KeychainError) in
            guard let current = state.file.passcode else {
                throw KeychainError(.passcodeNotSet, "No device passcode is set: set one (set-passcode)")
            }
            guard state.file.nvBase == deviceBase else {
                throw KeychainError(
                    .authenticationFailed,
                    "The escrowed passcode key is another device's (another user, or another state directory)")
            }
            guard Array(try Self.agreementKey(seed: seed).publicKey.rawRepresentation) == current.publicKey else {
                throw KeychainError(
                    .authenticationFailed,
                    "The escrowed key is not this device's passcode key (the passcode was changed or set anew since it was escrowed, or it belongs to another device)"
                )
            }
            try reclaimIndices(state, connection)
            _ = try ensureCounter(state.indices.enrollmentCounter, state, connection)
            let value = try ensureCounter(state.indices.passcodeCounter, state, connection)
            // As a change, so that a copy of the old sealed key no longer opens.
            state.file.passcode = try sealPasscodeKey(
                seed: seed, passcode: newPasscode, epoch: value + 1, state, connection)
            try commitPasscodeChange(&state, directory, connection)
            try writeLockState(unlocked: false, state, connection)
        }
    }

    /// Deletes what someone else defined at the device's handles (an index that refuses the
    /// device's authorization, or is of another shape), with the owner hierarchy's authorization.
    private func reclaimIndices(_ state: State, _ connection: TPMConnection) throws(KeychainError) {
        let indices = state.indices
        let shapes: [(UInt32, NVIndexKind, NVIndexOptions)] = [
            (indices.enrollmentCounter, .counter, .noDictionaryAttack),
            (indices.passcodeCounter, .counter, .noDictionaryAttack),
            (indices.lockState, .ordinary(size: 2), Self.lockStateOptions),
        ]
        for (index, kind, options) in shapes {
            guard
                let asDefined = try tpmCall({ try connection.nvIndexIsAsDefined(index, kind: kind, options: options) })
            else { continue }
            var ours = asDefined
            if ours {
                do {
                    if case .counter = kind {
                        _ = try counter(index, state, connection)
                    } else {
                        _ = try lockState(state, connection)
                    }
                } catch  where error.code == .notAvailable {
                    ours = false
                }
            }
            if !ours { try tpmCall { try connection.undefineNVIndex(index) } }
        }
    }

    /// Removes the passcode. Items that require it (devicePasscode without another way in, and
    /// whenPasscodeSetThisDeviceOnly) become unreadable for good.
    ///
    /// - Throws: as ``changePasscode(from:to:)``.
    package func removePasscode(_ old: SecretBytes) throws(KeychainError) {
        try replacePasscode(old) { (state, _, _, _) throws(KeychainError) in state.file.passcode = nil }
    }

    /// Verifies `old`, writes the next state (``DeviceFile/nextFileName``), moves the passcode
    /// counter, then renames the next state into place. A crash at any point leaves either the
    /// old passcode working (the counter did not move) or the new state ready for ``state(_:)``.
    private func replacePasscode(
        _ old: SecretBytes,
        _ change: (inout State, SecretBytes, UInt64, TPMConnection) throws(KeychainError) -> Void
    ) throws(KeychainError) {
        try withDevice { (state, directory, connection) throws(KeychainError) in
            guard let current = state.file.passcode else {
                throw KeychainError(.passcodeNotSet, "No device passcode is set")
            }
            let seed = try openPasscodeKey(current, passcode: old, state, connection)
            try change(&state, seed, current.epoch + 1, connection)
            // A change keeps the key (the same seed, sealed again); a removal retires it.
            if state.file.passcode?.publicKey != current.publicKey { state.file.retire(current) }
            try commitPasscodeChange(&state, directory, connection)
            try writeLockState(unlocked: true, state, connection)
        }
    }

    /// Makes `state`, whose passcode key is sealed at the passcode counter's next value, the
    /// device's: the next state written, the counter moved, then the state renamed into place.
    private func commitPasscodeChange(
        _ state: inout State, _ directory: Directory, _ connection: TPMConnection
    ) throws(KeychainError) {
        try write(&state, as: DeviceFile.nextFileName, in: directory, connection)
        try tpmCall {
            try connection.incrementNVCounter(state.indices.passcodeCounter, authValue: state.nvAuthorization)
        }
        try write(&state, as: DeviceFile.fileName, in: directory, connection)
        _ = try directory.remove(DeviceFile.nextFileName, durable: true)
    }

    /// The passcode key's public half, which key records wrap their keys to (nil without a passcode).
    func passcodePublicKey(_ state: State?) throws(KeychainError) -> Curve25519.KeyAgreement.PublicKey? {
        guard let bytes = state?.file.passcode?.publicKey else { return nil }
        do {
            return try Curve25519.KeyAgreement.PublicKey(rawRepresentation: bytes)
        } catch {
            throw KeychainError(.tampered, "\(directoryPath)/\(DeviceFile.fileName) holds an invalid passcode key")
        }
    }

    /// The passcode key's private half: the TPM checks the passcode (one try counted toward its
    /// dictionary-attack lockout when wrong) and the passcode counter.
    ///
    /// - Throws: ``KeychainError`` `.passcodeNotSet`, `.authenticationFailed`, `.lockout`, `.itemInvalidated`
    ///   (the sealed key's epoch is gone: a file put back from before a change).
    func passcodePrivateKey(_ passcode: SecretBytes) throws(KeychainError) -> Curve25519.KeyAgreement.PrivateKey {
        try withConnection { (connection) throws(KeychainError) in try passcodePrivateKey(passcode, connection) }
    }

    func passcodePrivateKey(
        _ passcode: SecretBytes, _ connection: TPMConnection
    ) throws(KeychainError) -> Curve25519.KeyAgreement.PrivateKey {
        guard let state = try state(connection), let current = state.file.passcode else {
            throw KeychainError(.passcodeNotSet, "No device passcode is set")
        }
        return try Self.agreementKey(seed: try openPasscodeKey(current, passcode: passcode, state, connection))
    }

    static func agreementKey(seed: SecretBytes) throws(KeychainError) -> Curve25519.KeyAgreement.PrivateKey {
        do {
            return try seed.withUnsafeBytes { try Curve25519.KeyAgreement.PrivateKey(rawRepresentation: $0) }
        } catch {
            throw KeychainError(.tampered, "The device passcode key is damaged", underlying: error)
        }
    }

    private func sealPasscodeKey(
        seed: SecretBytes, passcode: SecretBytes, epoch: UInt64, _ state: State,
        _ connection: TPMConnection
    ) throws(KeychainError) -> DeviceFile.PasscodeKey {
        let salt = randomBytes(32)
        // No PolicyCommandCode(Unseal) since 2026-11-27: beside the other assertions it adds
        // nothing (KeyRecord.sealedPolicy says why), and costs a command at every unlock.
        var policy = Policy([
            .authValue, try counterAssertion(state.indices.passcodeCounter, equals: epoch, connection),
        ])
        if LegacySealing.applies(to: directoryPath) { policy.assertions.append(.unsealOnly) }
        let sealed = try tpmCall {
            try connection.seal(seed, policy: policy, authValue: DeviceFile.authValue(passcode: passcode, salt: salt))
        }
        let publicKey = try Self.agreementKey(seed: seed).publicKey.rawRepresentation
        return DeviceFile.PasscodeKey(salt: salt, epoch: epoch, publicKey: Array(publicKey), sealedSeed: sealed)
    }

    private func openPasscodeKey(
        _ key: DeviceFile.PasscodeKey, passcode: SecretBytes, _ state: State,
        _ connection: TPMConnection
    ) throws(KeychainError) -> SecretBytes {
        let assertions: [PolicyAssertion] = [
            .authValue, try counterAssertion(state.indices.passcodeCounter, equals: key.epoch, connection),
        ]
        // Keys sealed before 2026-11-27 end with PolicyCommandCode(Unseal).
        var policy = Policy(assertions)
        if policy.digest != key.sealedSeed.authPolicy { policy = Policy(assertions + [.unsealOnly]) }
        do {
            return try connection.unseal(
                key.sealedSeed, policy: policy, authValue: DeviceFile.authValue(passcode: passcode, salt: key.salt),
                nvAuthorizations: nvAuthorizations(state))
        } catch let error as TPMError {
            switch error.code {
            case .authorizationFailed:
                throw KeychainError(
                    .authenticationFailed,
                    "Wrong device passcode (the TPM counted this try toward its dictionary-attack lockout)",
                    underlying: error)
            case .policyCheckFailed:
                throw KeychainError(
                    .itemInvalidated,
                    "The device passcode key in \(directoryPath) belongs to an older passcode (the passcode counter moved on): it was restored from a backup or replaced",
                    underlying: error)
            case .handleNotFound:
                // Review 3, N1: what stays (docs/SECURITY.md, "Other local users").
                throw KeychainError(
                    .notAvailable,
                    "The device's passcode counter (TPM NV index 0x\(String(state.indices.passcodeCounter, radix: 16))) is gone: someone with the TPM owner's authorization deleted it (on a machine whose owner hierarchy has no password, any user of the TPM can), or the TPM was cleared. The passcode can no longer be checked, so items that need it cannot be opened; nothing was deleted. tpm-keychain doctor says how to keep it from happening (an owner password)",
                    underlying: error)
            default:
                throw KeychainError(deviceTPM: error)
            }
        } catch {
            throw KeychainError(deviceTPM: error)
        }
    }

    private static func validate(_ passcode: SecretBytes) throws(KeychainError) {
        guard passcode.count >= 4, passcode.count <= 1024 else {
            throw KeychainError(.invalidParameter, "A device passcode has 4 to 1024 bytes, not \(passcode.count)")
        }
    }
}

import Crypto
import FoundationEssentials
package import KeychainVocabulary
import SystemCalls
package import TPM
import WireFormat

// Opening a protected item's key record: the proofs checked against the device, the sealed
// secret unsealed in a policy session, the record key derived.
extension ItemStore {

    /// Opens a key record with what the caller proved: a biometric match, the passcode, or
    /// neither (records that only check the lock state). The TPM checks each protector.
    ///
    /// - Throws: ``KeychainError`` `.interactionNotAllowed` (nothing given that opens the record, or
    ///   the device is locked), `.itemInvalidated` (enrollment changed or passcode removed, and no
    ///   other way in: the record and its items are deleted), `.biometryInvalidated` (the
    ///   biometric way is gone but the passcode still opens it), `.authenticationFailed`,
    ///   `.lockout`, `.passcodeNotSet`, `.tampered`.
    ///
    /// - Parameter withStartupEpoch: also read the TPM's startup epoch (for a reuse window).
    package func openRecord(
        _ recordID: [UInt8], device: Device, biometry: BiometryProof?,
        passcode: SecretBytes?, withStartupEpoch: Bool = false
    ) throws(KeychainError) -> RecordKey {
        // One TPM connection for everything: connecting (and loading the storage key) is most of
        // the cost of a first protected read.
        try device.withConnection { (connection) throws(KeychainError) in
            try openRecord(
                recordID, device: device, connection, biometry: biometry, passcode: passcode,
                withStartupEpoch: withStartupEpoch)
        }
    }

    private func openRecord(
        _ recordID: [UInt8], device: Device, _ connection: TPMConnection, biometry: BiometryProof?,
        passcode: SecretBytes?, withStartupEpoch: Bool
    ) throws(KeychainError) -> RecordKey {
        let state = try current()
        let record = try keyRecord(recordID, state)
        let protection = try record.protection()
        let path = root + "/" + state.layout.records + "/" + KeyRecord.fileName(recordID)
        // Nothing here deletes: what this reader sees (its device state, its TPM counters) may not
        // be what the record's owner sees. Invalidation is reported; a purge proves and deletes.
        let deviceState = try device.state(connection)
        try checkBelongsToDevice(record, deviceState, device: device, path: path)
        if protection.needsPasscodeKey {
            switch try device.standing(ofPasscodeKey: record.passcodeKey, connection) {
            case .current:
                break
            case .retired:
                throw KeychainError(
                    .itemInvalidated,
                    "The item was protected by a device passcode that has since been removed: it can never open again. It was kept until deleted, or purged with every other such item"
                )
            case .unknown:
                throw KeychainError(
                    .interactionNotAllowed,
                    "The item's key record was made for a device passcode that the device state in \(device.directoryPath) never held: it belongs to another device (another member of a shared store, or another state directory: XDG_STATE_HOME, TPM_KEYCHAIN_DEVICE_DIR). Nothing was changed"
                )
            }
        }
        do throws(KeychainError) {
            let secret: SecretBytes
            if protection.needsBothProtectors {
                guard let biometry, let passcode else {
                    throw KeychainError(.interactionNotAllowed, "This item needs both biometry and the device passcode")
                }
                let sealed = try openSealed(
                    record, protection, device: device, deviceState, connection, biometry: biometry, path: path)
                let wrapped = try record.unwrapPasscodeProtector(
                    try device.passcodePrivateKey(passcode, connection), path: path)
                secret = KeyRecord.combined(sealed, wrapped, recordID: recordID)
            } else if protection.hasSealedProtector, biometry != nil || protection.biometry == nil {
                do throws(KeychainError) {
                    secret = try openSealed(
                        record, protection, device: device, deviceState, connection, biometry: biometry, path: path)
                } catch let error where error.code == .biometryInvalidated && passcode != nil {
                    secret = try record.unwrapPasscodeProtector(
                        try device.passcodePrivateKey(passcode!, connection), path: path)
                }
            } else if protection.hasPasscodeProtector, let passcode {
                secret = try record.unwrapPasscodeProtector(
                    try device.passcodePrivateKey(passcode, connection), path: path)
            } else {
                throw KeychainError(
                    .interactionNotAllowed,
                    protection.passcode && protection.biometry != nil
                        ? "This item needs biometry or the device passcode"
                        : protection.passcode
                            ? "This item needs the device passcode" : "This item needs biometry")
            }
            return RecordKey(
                recordID: recordID, privateKey: try KeyRecord.privateKey(secret: secret, recordID: recordID),
                startupEpoch: withStartupEpoch ? try device.tpmCall { try connection.startupEpoch() } : nil)
        } catch let error where error.code == .biometryInvalidated && !protection.hasPasscodeProtector {
            throw KeychainError(
                .itemInvalidated,
                "The biometric enrollment changed since the item was added, and the TPM no longer releases its key: it can never open again. It was kept until deleted, or purged with every other such item",
                underlying: error)
        }
    }

    /// A record names the device that made it (its NV base) when it depends on that device's
    /// counters or passcode: another device's record is refused here, before its policy fails in
    /// a way that would read as an invalidation.
    func checkBelongsToDevice(
        _ record: KeyRecord, _ deviceState: Device.State?, device: Device, path: String
    ) throws(KeychainError) {
        guard record.nvBase != 0, record.nvBase != deviceState?.file.nvBase else { return }
        let own =
            deviceState.map { "this device's is 0x" + String($0.file.nvBase, radix: 16) }
            ?? "this user has no device state in \(device.directoryPath)"
        throw KeychainError(
            .interactionNotAllowed,
            "\(path) belongs to another device (NV base 0x\(String(record.nvBase, radix: 16)); \(own)): another user's, another member's of a shared store, or device state moved away. Only that device opens it; nothing was changed"
        )
    }

    /// Whether a biometryCurrentSet record can no longer open because the enrollment changed since
    /// it was made: asked before anyone is asked to match, so that nobody authenticates for an
    /// item the TPM will refuse (as iOS does not prompt for one). Only when the device's state
    /// file says the enrollment is not the one it last noted (no TPM command otherwise) is the
    /// change noted (the enrollment counter moves, as a match would make it move) and the
    /// counter compared with the record's epoch.
    package func enrollmentChangeInvalidates(
        _ recordID: [UInt8], enrollmentIdentifier: [UInt8], device: Device
    ) throws(KeychainError) -> Bool {
        guard device.enrollmentLooksChanged(enrollmentIdentifier) else { return false }
        let record = try keyRecord(recordID, try current())
        guard try record.protection().biometry == .currentSet else { return false }
        return try device.withConnection { (connection) throws(KeychainError) -> Bool in
            try device.checkEnrollment(identifier: enrollmentIdentifier, connection)
            guard let deviceState = try device.state(connection), deviceState.file.nvBase == record.nvBase else {
                return false
            }
            let counter = DeviceIndices(base: record.nvBase).enrollmentCounter
            return try device.counter(counter, deviceState, connection) != record.enrollmentEpoch
        }
    }

    /// Unseals the sealed protector. On a policy failure, the counters say why.
    private func openSealed(
        _ record: KeyRecord, _ protection: Protection, device: Device, _ deviceState: Device.State?,
        _ connection: TPMConnection, biometry: BiometryProof?, path: String
    ) throws(KeychainError) -> SecretBytes {
        guard let sealed = record.sealedProtector else {
            throw KeychainError(.tampered, "\(path) has no sealed protector")
        }
        if protection.biometry != nil {
            guard let biometry else { throw KeychainError(.interactionNotAllowed, "This item needs biometry") }
            // Any change of the enrollment moves the counter before the match is honoured.
            try device.checkEnrollment(identifier: biometry.enrollmentIdentifier, connection, stateRead: deviceState)
        }
        do {
            // The record names this device (checked before), so its policy reads this device's indices.
            let authorizations = deviceState.map(device.nvAuthorizations) ?? [:]
            if record.flags.contains(.lockBound), let deviceState {
                try ensureUnlockedWithoutPasscode(device, deviceState, connection)
            }
            // The device's indices are named as the device defined them, written (no TPM command);
            // a policy that does not come out as sealed that way is computed again from the
            // names the TPM reports. Either way with and without PolicyCommandCode (records sealed
            // before 2026-11-27 have it; see KeyRecord.sealedPolicy).
            let expected = { (index: UInt32) throws(KeychainError) -> [UInt8] in
                if let expected = connection.expectedNVIndexName(index) { return expected }
                return try Self.reportedName(of: index, connection)
            }
            let reported = { (index: UInt32) throws(KeychainError) -> [UInt8] in
                try Self.reportedName(of: index, connection)
            }
            var policy = try record.sealedPolicy(nvName: expected, commandCode: false)
            for (names, commandCode) in [(expected, true), (reported, false), (reported, true)]
            where policy.digest != sealed.authPolicy {
                policy = try record.sealedPolicy(nvName: names, commandCode: commandCode)
            }
            do {
                return try connection.unseal(sealed, policy: policy, nvAuthorizations: authorizations)
            } catch let error as TPMError where error.code == .policyCheckFailed || error.code == .nvIndexUninitialized
            {
                let indices = DeviceIndices(base: record.nvBase)
                if protection.biometry == .currentSet, let deviceState,
                    try device.counter(indices.enrollmentCounter, deviceState, connection) != record.enrollmentEpoch
                {
                    throw KeychainError(
                        .biometryInvalidated, "The TPM refused the key: the enrollment counter moved", underlying: error
                    )
                }
                if record.flags.contains(.lockBound) {
                    throw KeychainError(
                        .interactionNotAllowed, "The keychain is locked: unlock it with the device passcode",
                        underlying: error)
                }
                throw KeychainError(.tampered, "\(path): the TPM refused its sealed protector", underlying: error)
            } catch let error as TPMError where error.code == .handleNotFound {
                throw Self.missingIndex(nil, error)
            } catch let error as TPMError where error.code == .authorizationFailed && !authorizations.isEmpty {
                // PolicyNV refused the device's authorization: an index defined again by someone else.
                throw Device.taken(record.nvBase, error)
            } catch let error as TPMError where error.code == .malformedData || error.code == .wrongStorageKey {
                throw KeychainError(
                    .tampered, "\(path): its sealed protector is damaged or belongs to another TPM", underlying: error)
            } catch {
                throw KeychainError(deviceTPM: error)
            }
        }
    }

    /// The name the TPM reports for an index a record's policy names.
    static func reportedName(of index: UInt32, _ connection: TPMConnection) throws(KeychainError) -> [UInt8] {
        do {
            return try connection.nvIndexName(index)
        } catch let error as TPMError where error.code == .handleNotFound {
            throw Self.missingIndex(index, error)
        } catch {
            throw KeychainError(deviceTPM: error)
        }
    }

    /// An NV index a record's policy names is not defined: undefined by someone with the TPM's
    /// owner authorization, or never defined on this TPM. It cannot be checked now, which proves nothing.
    static func missingIndex(_ index: UInt32?, _ error: TPMError) -> KeychainError {
        let which = index.map { "NV index 0x" + String($0, radix: 16) } ?? "An NV index"
        return KeychainError(
            .notAvailable,
            "\(which) that the item's policy names is not defined on this TPM: the item cannot be checked now (nothing was changed)",
            underlying: error)
    }

    /// A device without a passcode is always unlocked, as an iPhone without one is: its lock
    /// state is written whenever it reads locked (after a reboot).
    func ensureUnlockedWithoutPasscode(
        _ device: Device, _ deviceState: Device.State, _ connection: TPMConnection
    ) throws(KeychainError) {
        guard deviceState.file.passcode == nil else { return }
        if let lock = try device.lockState(deviceState, connection), lock.sinceBoot, lock.now { return }
        try device.writeLockState(unlocked: true, deviceState, connection)
    }
}

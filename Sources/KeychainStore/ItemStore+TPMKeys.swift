package import KeychainVocabulary
import SystemCalls
package import TPM

// Keys made in the TPM and kept as key items (Apple's Secure Enclave keys): the item's secret is
// the key's blob and authorization value (TPMKeyValue), so reading it takes what the item's
// protection asks (a person, the device's lock state); and the key's own policy repeats its
// record's device assertions, so the TPM itself refuses the key once the enrollment changes or
// the device locks, whoever holds the blob.
extension ItemStore {
    /// Makes a key in the TPM for a key item: the item's secret, and the record it must be
    /// written under (``AccessWrite/record``), whose device assertions the key's policy carries.
    ///
    /// - Parameter protection: the item's protection; nil, or one that needs no record: the key
    ///   is used with its authorization value alone, as an item under the master key is read.
    /// - Parameter forKeyFile: make the key under the key-file parent with an empty authorization
    ///   value and no policy beyond it, so that it can be written as a TPM 2.0 Key File
    ///   (``TPMKey/tss2KeyFile(emptyAuth:)``) that other tools use. The item's protection then
    ///   guards the keychain's copy only: whoever holds a written file and the TPM uses the key.
    /// - Throws: ``KeychainError`` as a protected write does (`.passcodeNotSet`,
    ///   `.biometryNotEnrolled`, `.notAvailable`), and `.tpmUnavailable` and the TPM's others.
    package func makeTPMKey(
        _ usage: TPMKeyUsage, device: Device, protection: Protection?, enrollmentIdentifier: [UInt8]?,
        forKeyFile: Bool = false
    ) throws(KeychainError) -> (value: TPMKeyValue, record: [UInt8]?) {
        let record: KeyRecord? = try withWriteAccess { (state) throws(KeychainError) -> KeyRecord? in
            guard let protection,
                try protection.needsKeyRecord(passcodeSet: { () throws(KeychainError) in try device.passcodeIsSet() })
            else { return nil }
            return try self.record(for: protection, device: device, enrollmentIdentifier: enrollmentIdentifier, state)
        }
        let authValue: SecretBytes
        do {
            // A key file's tools ask for a password or none: the key-file key has an empty one.
            authValue = forKeyFile ? SecretBytes(copying: []) : try SecretBytes.random(count: 32)
        } catch {
            throw KeychainError(.storageFailed, "No randomness for a TPM key's authorization value", underlying: error)
        }
        return try device.withConnection { (connection) throws(KeychainError) in
            let policy =
                forKeyFile
                ? .authValue
                : try record?.tpmKeyPolicy(nvName: { (index) throws(KeychainError) in
                    try Self.reportedName(of: index, connection)
                }) ?? .authValue
            let key = try device.tpmCall {
                try connection.createKey(
                    usage, policy: policy, authValue: authValue, countsFailures: false,
                    parent: forKeyFile ? .keyFilePrimary : .storageKey)
            }
            return (TPMKeyValue(key: key, authValue: authValue), record?.recordID)
        }
    }

    /// Runs `body` with the key item's TPM key, the policy that uses it and the NV authorizations
    /// that policy needs. `recordID` is the item's key record (nil: under the master key).
    ///
    /// - Throws: ``KeychainError`` `.itemInvalidated` when the TPM refuses the key because the
    ///   enrollment changed since it was made, `.interactionNotAllowed` when the device is locked,
    ///   `.tampered` for a key whose policy is not its record's, `.wrongTPM`-like `.tampered` for a
    ///   key of another TPM, and the TPM's other errors.
    package func useTPMKey<R>(
        _ value: TPMKeyValue, recordID: [UInt8]?, device: Device,
        _ body: (TPMConnection, Policy, [UInt32: SecretBytes]) throws -> R
    ) throws(KeychainError) -> R {
        let state = try current()
        // A key-file key's policy is its (empty) authorization value alone, whatever its item's
        // record: the record guarded reading the item, which the caller has done.
        let keyFileKey = value.key.storageKeyAlgorithm == .eccP256KeyFile
        let record =
            keyFileKey
            ? nil : try recordID.map { (recordID) throws(KeychainError) in try keyRecord(recordID, state) }
        let what = "The TPM key"
        return try device.withConnection { (connection) throws(KeychainError) in
            var policy = Policy.authValue
            var authorizations: [UInt32: SecretBytes] = [:]
            var deviceState: Device.State?
            if let record {
                let path = root + "/" + state.layout.records + "/" + KeyRecord.fileName(record.recordID)
                deviceState = try device.state(connection)
                try checkBelongsToDevice(record, deviceState, device: device, path: path)
                if record.flags.contains(.lockBound), let deviceState {
                    try ensureUnlockedWithoutPasscode(device, deviceState, connection)
                }
                authorizations = deviceState.map(device.nvAuthorizations) ?? [:]
                let expected = { (index: UInt32) throws(KeychainError) -> [UInt8] in
                    if let expected = connection.expectedNVIndexName(index) { return expected }
                    return try Self.reportedName(of: index, connection)
                }
                policy = try record.tpmKeyPolicy(nvName: expected)
                if policy.digest != value.key.authPolicy {
                    policy = try record.tpmKeyPolicy(nvName: { (index) throws(KeychainError) in
                        try Self.reportedName(of: index, connection)
                    })
                }
            }
            guard policy.digest == value.key.authPolicy else {
                throw KeychainError(.tampered, "\(what)'s policy is not the one its key record implies")
            }
            do {
                return try body(connection, policy, authorizations)
            } catch let error as TPMError where error.code == .policyCheckFailed || error.code == .nvIndexUninitialized
            {
                if let record, let deviceState {
                    let protection = try record.protection()
                    let indices = DeviceIndices(base: record.nvBase)
                    if protection.biometry == .currentSet,
                        try device.counter(indices.enrollmentCounter, deviceState, connection)
                            != record.enrollmentEpoch
                    {
                        throw KeychainError(
                            .itemInvalidated,
                            "The biometric enrollment changed since the key was made, and the TPM refuses it: it can never be used again",
                            underlying: error)
                    }
                    if record.flags.contains(.lockBound) {
                        throw KeychainError(
                            .interactionNotAllowed, "The keychain is locked: unlock it with the device passcode",
                            underlying: error)
                    }
                }
                throw KeychainError(.tampered, "\(what) failed its policy in the TPM", underlying: error)
            } catch let error as TPMError where error.code == .handleNotFound {
                throw Self.missingIndex(nil, error)
            } catch let error as TPMError where error.code == .malformedData || error.code == .wrongStorageKey {
                throw KeychainError(
                    .tampered, "\(what) is damaged or belongs to another TPM (it cannot leave the TPM that made it)",
                    underlying: error)
            } catch let error as KeychainError {
                throw error
            } catch {
                throw KeychainError(deviceTPM: error)
            }
        }
    }
}

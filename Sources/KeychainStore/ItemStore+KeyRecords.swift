import Crypto
import FoundationEssentials
import KeychainVocabulary
import SystemCalls
import TPM
import WireFormat

// Key records on the write path: choosing the record an item's protection needs, or making one,
// and the item keys derived from a record.
extension ItemStore {
    /// The record for new items with `protection`: an existing one when its bindings are still
    /// current, else a new one. Creating needs no person: the sealed protector's policy is known
    /// in advance, and the passcode protector wraps to the device's public passcode key.
    ///
    /// - Throws: ``KeychainError`` `.passcodeNotSet`, `.biometryNotEnrolled`, `.notAvailable`.
    func record(
        for protection: Protection, device: Device, enrollmentIdentifier: [UInt8]?,
        _ state: OpenState
    ) throws(KeychainError) -> KeyRecord {
        var epoch: UInt64 = 0
        if protection.biometry == .currentSet {
            guard let enrollmentIdentifier else {
                throw KeychainError(
                    .biometryNotEnrolled,
                    "biometryCurrentSet binds the item to the enrolled biometry, and nothing is enrolled")
            }
            // Makes the device when there is none.
            epoch = try device.enrollmentEpoch(identifier: enrollmentIdentifier).epoch
        }
        // An existing record is found from device.meta as read, without the TPM: adding under a
        // protection in use needs no TPM, as on iOS. Each record is authenticated under the master
        // key, so a file edited to say otherwise can only choose a record the store made. A new
        // record is made from the authenticated state.
        let seen = try binding(protection, device.peek())
        for existing in try allRecords(state)
        where existing.accessibility == protection.accessibility
            && existing.accessFlags == protection.flags && existing.flags.contains(.lockBound) == seen.lockBound
            && existing.enrollmentEpoch == epoch && existing.passcodeKey == seen.passcodeBytes
            && existing.nvBase == seen.deviceBase
        {
            return existing
        }
        let deviceState = try device.state(nil)
        let (passcodeKey, lockBound, deviceBase, passcodeBytes) = try binding(protection, deviceState?.file)
        if deviceState == nil && (lockBound || protection.biometry == .currentSet) {
            throw KeychainError(
                .notAvailable, "This protection needs the device's state in \(device.directoryPath), which is missing")
        }
        let recordID = randomBytes(16)
        let draft = KeyRecord(
            storeID: storeID, recordID: recordID, accessibility: protection.accessibility,
            flags: lockBound ? .lockBound : [], accessFlags: protection.flags, nvBase: deviceBase,
            enrollmentEpoch: epoch, passcodeKey: passcodeBytes, publicKey: [], sealedProtector: nil,
            passcodeProtector: nil)
        let (sealedSecret, wrappedSecret, secret) = try Self.recordSecrets(protection, recordID: recordID)
        let sealed: SealedObject? = try sealedSecret.map { (sealedSecret) throws(KeychainError) in
            try device.withConnection { (connection) throws(KeychainError) in
                if lockBound, let deviceState {
                    _ = try device.lockAssertion(protection.accessibility.lockRequirement, deviceState, connection)
                }
                if protection.biometry == .currentSet, let deviceState {
                    _ = try device.ensureCounter(deviceState.indices.enrollmentCounter, deviceState, connection)
                }
                let policy = try draft.sealedPolicy(
                    nvName: { (index) throws(KeychainError) in try device.tpmCall { try connection.nvIndexName(index) }
                    },
                    commandCode: LegacySealing.applies(to: root))
                return try device.tpmCall { try connection.seal(sealedSecret, policy: policy) }
            }
        }
        var wrapped: [UInt8]?
        if let wrappedSecret, let passcodeKey {
            do {
                wrapped = try KeyRecord.wrapForPasscode(
                    wrappedSecret, passcodeKey: passcodeKey, storeID: storeID, recordID: recordID)
            } catch {
                throw KeychainError(.storageFailed, "Wrapping the record key failed", underlying: error)
            }
        }
        let record = KeyRecord(
            storeID: storeID, recordID: recordID, accessibility: draft.accessibility, flags: draft.flags,
            accessFlags: draft.accessFlags, nvBase: draft.nvBase, enrollmentEpoch: epoch, passcodeKey: passcodeBytes,
            publicKey: Array(try KeyRecord.privateKey(secret: secret, recordID: recordID).publicKey.rawRepresentation),
            sealedProtector: sealed, passcodeProtector: wrapped)
        guard let directory = try Directory.open(state.layout.records, in: rootDirectory, create: true) else {
            throw KeychainError(.storageFailed, "Cannot create \(root)/\(state.layout.records)")
        }
        try directory.replace(
            KeyRecord.fileName(recordID), with: record.serialized(metadataKey: state.keys.metadata), durable: durable)
        keyRecords.remember(record, id: recordID)
        return record
    }

    /// What a record for `protection` binds to, from the device state `file`: the passcode key
    /// (zero bytes without one), whether the sealed protector checks the lock state, and the
    /// device's NV base, which names the device that made the record (for a policy on its
    /// counters, and for a record only its passcode key opens: see checkBelongsToDevice).
    ///
    /// - Throws: ``KeychainError`` `.passcodeNotSet` when the protection needs a passcode and none is set.
    private func binding(
        _ protection: Protection, _ file: DeviceFile?
    ) throws(KeychainError)
        -> (
            passcodeKey: Curve25519.KeyAgreement.PublicKey?, lockBound: Bool, deviceBase: UInt32, passcodeBytes: [UInt8]
        )
    {
        let passcodeKey: Curve25519.KeyAgreement.PublicKey?
        do {
            passcodeKey = try file?.passcode.map {
                try Curve25519.KeyAgreement.PublicKey(rawRepresentation: $0.publicKey)
            }
        } catch {
            throw KeychainError(.tampered, "The device state holds an invalid passcode key", underlying: error)
        }
        if protection.requiresPasscodeSet && passcodeKey == nil {
            throw KeychainError(.passcodeNotSet, "This protection needs a device passcode, and none is set")
        }
        let lockBound =
            protection.hasSealedProtector && passcodeKey != nil && protection.accessibility.lockRequirement != .none
        let needsDevice = protection.biometry == .currentSet || lockBound || protection.needsPasscodeKey
        let passcodeBytes = passcodeKey.map { Array($0.rawRepresentation) } ?? [UInt8](repeating: 0, count: 32)
        return (passcodeKey, lockBound, needsDevice ? file?.nvBase ?? 0 : 0, passcodeBytes)
    }

    /// The secrets of a new record: what the sealed protector holds, what the passcode protector
    /// wraps, and the record secret S they give.
    private static func recordSecrets(
        _ protection: Protection, recordID: [UInt8]
    ) throws(KeychainError) -> (SecretBytes?, SecretBytes?, SecretBytes) {
        do {
            let first = try SecretBytes.random(count: 32)
            if protection.needsBothProtectors {
                let second = try SecretBytes.random(count: 32)
                return (first, second, KeyRecord.combined(first, second, recordID: recordID))
            }
            return (protection.hasSealedProtector ? first : nil, protection.hasPasscodeProtector ? first : nil, first)
        } catch {
            throw KeychainError(.storageFailed, "No randomness for a key record", underlying: error)
        }
    }

    func allRecords(_ state: OpenState) throws(KeychainError) -> [KeyRecord] {
        guard let directory = try Directory.open(state.layout.records, in: rootDirectory, create: false) else {
            return []
        }
        var records: [KeyRecord] = []
        for name in try directory.entries() where name.hasSuffix(".key") && name.count == 36 {
            guard let recordID = [UInt8](hexString: String(name.dropLast(4))) else { continue }
            records.append(try keyRecord(recordID, state))
        }
        return records
    }

    // MARK: Item keys

    /// The key of a protected item's secret section, for a writer: a fresh ephemeral key agrees
    /// with the record's public key; its public half becomes the header's salt.
    static func protectedWriteKeys(
        record: KeyRecord, storeID: [UInt8], itemsKey: SymmetricKey
    ) throws(KeychainError)
        -> (salt: [UInt8], secretKey: (SymmetricKey) -> SymmetricKey)
    {
        do {
            let ephemeral = Curve25519.KeyAgreement.PrivateKey()
            let shared = try ephemeral.sharedSecretFromKeyAgreement(
                with: try Curve25519.KeyAgreement.PublicKey(rawRepresentation: record.publicKey))
            return (
                Array(ephemeral.publicKey.rawRepresentation),
                { attributesKey in
                    KeyRecord.protectedSecretKey(
                        attributesKey: attributesKey, shared: shared, recordPublicKey: record.publicKey,
                        storeID: storeID, recordID: record.recordID)
                }
            )
        } catch {
            throw KeychainError(.tampered, "The key record's public key is invalid", underlying: error)
        }
    }

    /// The key of a format-2 item's secret section: the attributes key, or for a protected item
    /// the record agreement mixed in.
    ///
    /// - Throws: ``KeychainError`` `.interactionNotAllowed` when the item is protected and `recordKey`
    ///   is not its record's.
    func v2SecretKey(
        _ header: ItemFileV2.Header, _ state: OpenState, recordKey: RecordKey?
    ) throws(KeychainError) -> SymmetricKey {
        let attributesKey = v2ItemKey(header, state.keys)
        guard header.keyRecord != ItemFileV2.masterKeyRecord else { return attributesKey }
        guard let recordKey, recordKey.recordID == header.keyRecord else {
            throw KeychainError(
                .interactionNotAllowed, "The item is protected: reading its secret needs an authentication context")
        }
        let record = try keyRecord(header.keyRecord, state)
        return try recordKey.secretKeys.key(salt: header.salt) { () throws(KeychainError) in
            do {
                let shared = try recordKey.privateKey.sharedSecretFromKeyAgreement(
                    with: try Curve25519.KeyAgreement.PublicKey(rawRepresentation: header.salt))
                return KeyRecord.protectedSecretKey(
                    attributesKey: attributesKey, shared: shared, recordPublicKey: record.publicKey,
                    storeID: storeID, recordID: record.recordID)
            } catch {
                throw KeychainError(.tampered, "The item's key agreement field is damaged", underlying: error)
            }
        }
    }
}

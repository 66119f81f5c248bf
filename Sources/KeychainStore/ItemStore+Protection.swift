import Crypto
import Foundation
import SystemCalls
package import TPM
package import KeychainVocabulary
import WireFormat

// Access control: key records, and the secret keys of the items that name one. Attributes stay
// under the master key (listing never needs a person); only a protected item's secret section
// needs its record's private key, which only the TPM-gated protectors yield.
extension ItemStore {
    /// What reading an item's secret needs.
    package struct ItemProtection: Sendable, Equatable {
        package let recordID: [UInt8]
        package let protection: Protection
        /// Whether the record's sealed protector checks the device's lock state.
        package let lockBound: Bool
    }

    /// A key record's private key, opened: what a reuse window keeps. Release it to erase it.
    package struct RecordKey: Sendable {
        package let recordID: [UInt8]
        let privateKey: Curve25519.KeyAgreement.PrivateKey
        /// The TPM's startup epoch (``TPMConnection/startupEpoch()``) when it was opened, when
        /// asked for: a reuse window ends when it changes.
        package let startupEpoch: UInt64?
        /// The secret keys of items already read with this key, by their header's salt: a read
        /// inside a reuse window then costs no key agreement. Gone with the key.
        let secretKeys = SecretKeyCache()
    }

    /// Item secret keys derived under one opened record (at most 4096, then started afresh).
    final class SecretKeyCache: Sendable {
        private let keys = Locked<[[UInt8]: SymmetricKey]>([:])

        func key(salt: ArraySlice<UInt8>, _ derive: () throws(KeychainError) -> SymmetricKey) throws(KeychainError) -> SymmetricKey {
            let salt = Array(salt)
            if let cached = keys.withLock({ $0[salt] }) { return cached }
            let key = try derive()
            keys.withLock { keys in
                if keys.count >= 4096 { keys.removeAll(keepingCapacity: true) }
                keys[salt] = key
            }
            return key
        }
    }

    /// What a read of a protected generic password found.
    package enum ProtectedRead: Sendable {
        /// The value (nil: no such item).
        case value(ItemValue?)
        /// The item's secret needs its record opened first.
        case needs(ItemProtection)
    }

    /// The value of a generic password, reading its file once: a protected item's secret is
    /// decrypted with the key `keptKey` gives for its protection (a reuse window's), else its
    /// protection is returned so that the caller can authenticate the person and open the record.
    ///
    /// - Throws: ``KeychainError`` `.tampered`, `.unsafeFileSystem`, `.storageFailed`.
    package func value(_ identity: ItemIdentity, keptKey: (ItemProtection) -> RecordKey?) throws(KeychainError) -> ProtectedRead {
        let found = try readFollowingRotation { (state) throws(KeychainError) -> ProtectedRead? in
            let read = try value(identity, keptKey: keptKey, state)
            if case .value(nil) = read { return nil }
            return read
        }
        return found ?? .value(nil)
    }

    private func value(_ identity: ItemIdentity, keptKey: (ItemProtection) -> RecordKey?, _ state: OpenState) throws(KeychainError) -> ProtectedRead {
        guard state.layout.version == 2 else { return .value(try value(identity)) }
        let names = names(identity, state)
        guard let file = try openItem(names, state) else { return .value(try confirmAbsence(names, state)) }
        let bytes = try readWhole(file, version: 2)
        let header = try ItemFileV2.decodeHeader(bytes[...], fileSize: bytes.count, storeID: storeID, path: file.path)
        guard header.itemClass == .genericPassword else {
            throw KeychainError(.tampered, "\(file.path) holds another item: it was swapped or renamed")
        }
        guard try checkGeneration(header.generation, file: names.file, group: names.service, path: file.path, in: state.layout.items) else {
            return .value(nil)
        }
        var recordKey: RecordKey?
        if header.keyRecord != ItemFileV2.masterKeyRecord {
            let record = try keyRecord(header.keyRecord, state)
            let protection = ItemProtection(recordID: record.recordID, protection: try record.protection(),
                                            lockBound: record.flags.contains(.lockBound))
            guard let kept = keptKey(protection) else { return .needs(protection) }
            recordKey = kept
        }
        let secret = try ItemFileV2.decryptSecret(of: bytes, header: header, key: v2SecretKey(header, state, recordKey: recordKey),
                                                  primaryKey: names.encodedIdentity, path: file.path)
        return .value(ItemValue(kind: header.kind, bytes: secret))
    }

    /// Proof, from the caller, that a person matched the enrolled biometry just now.
    package struct BiometryProof: Sendable {
        /// The authenticator's enrollment identifier when it matched (changes with every enrollment change).
        package let enrollmentIdentifier: [UInt8]
        package init(enrollmentIdentifier: [UInt8]) { self.enrollmentIdentifier = enrollmentIdentifier }
    }

    // MARK: Reading a protection

    /// The protection of a generic password's secret, or nil when the master key opens it (no
    /// person needed). Reads the header only.
    ///
    /// - Throws: ``KeychainError`` `.itemNotFound`, `.tampered`.
    package func protection(of identity: ItemIdentity) throws(KeychainError) -> ItemProtection? {
        let found = try readFollowingRotation { (state) throws(KeychainError) -> ItemProtection?? in try protection(of: identity, state) }
        guard let found else { throw KeychainError(.itemNotFound, "No item for \(identity.account)") }
        return found
    }

    /// - Returns: nil when there is no such item; else its protection, nil for the master key.
    private func protection(of identity: ItemIdentity, _ state: OpenState) throws(KeychainError) -> ItemProtection?? {
        guard state.layout.version == 2 else { return .some(nil) }
        let names = names(identity, state)
        guard let file = try openItem(names, state) else {
            _ = try confirmAbsence(names, state) as ItemProtection?
            return nil
        }
        guard file.size >= ItemFileV2.headerSize else { throw KeychainError(.tampered, "\(file.path) is truncated") }
        let header = try ItemFileV2.decodeHeader(try file.read(count: ItemFileV2.headerSize, at: 0)[...], fileSize: file.size,
                                                 storeID: storeID, path: file.path)
        guard try checkGeneration(header.generation, file: names.file, group: names.service, path: file.path, in: state.layout.items) else {
            return nil
        }
        guard header.keyRecord != ItemFileV2.masterKeyRecord else { return .some(nil) }
        let record = try keyRecord(header.keyRecord, state)
        return ItemProtection(recordID: record.recordID, protection: try record.protection(), lockBound: record.flags.contains(.lockBound))
    }

    /// A key record, read and authenticated (cached: records never change once written).
    func keyRecord(_ recordID: [UInt8], _ state: OpenState) throws(KeychainError) -> KeyRecord {
        if let cached = caches.withLock({ $0.records[recordID] }) { return cached }
        let path = root + "/" + state.layout.records + "/" + KeyRecord.fileName(recordID)
        guard let directory = try Directory.open(state.layout.records, in: rootDirectory, create: false),
              let file = try directory.openFile(KeyRecord.fileName(recordID)) else {
            throw KeychainError(.tampered, "\(path), the key record an item names, is missing")
        }
        guard file.size <= 8192 else { throw KeychainError(.tampered, "\(path) is too large to be a key record") }
        let record = try KeyRecord(parsing: try file.read(count: file.size, at: 0), storeID: storeID, metadataKey: state.keys.metadata,
                                   path: path)
        guard record.recordID == recordID else { throw KeychainError(.tampered, "\(path) holds another key record") }
        caches.withLock { $0.records[recordID] = record }
        return record
    }

    // MARK: Opening a record

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
    package func openRecord(_ recordID: [UInt8], device: Device, biometry: BiometryProof?,
                            passcode: SecretBytes?, withStartupEpoch: Bool = false) throws(KeychainError) -> RecordKey {
        // One TPM connection for everything: connecting (and loading the storage key) is most of
        // the cost of a first protected read.
        try device.withConnection { (connection) throws(KeychainError) in
            try openRecord(recordID, device: device, connection, biometry: biometry, passcode: passcode, withStartupEpoch: withStartupEpoch)
        }
    }

    private func openRecord(_ recordID: [UInt8], device: Device, _ connection: TPMConnection, biometry: BiometryProof?,
                            passcode: SecretBytes?, withStartupEpoch: Bool) throws(KeychainError) -> RecordKey {
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
                throw KeychainError(.itemInvalidated, "The item was protected by a device passcode that has since been removed: it can never open again. It was kept until deleted, or purged with every other such item")
            case .unknown:
                throw KeychainError(.interactionNotAllowed, "The item's key record was made for a device passcode that the device state in \(device.directoryPath) never held: it belongs to another device (another member of a shared store, or another state directory: XDG_STATE_HOME, TPM_KEYCHAIN_DEVICE_DIR). Nothing was changed")
            }
        }
        do throws(KeychainError) {
            let secret: SecretBytes
            if protection.needsBothProtectors {
                guard let biometry, let passcode else {
                    throw KeychainError(.interactionNotAllowed, "This item needs both biometry and the device passcode")
                }
                let sealed = try openSealed(record, protection, device: device, deviceState, connection, biometry: biometry, path: path)
                let wrapped = try record.unwrapPasscodeProtector(try device.passcodePrivateKey(passcode, connection), path: path)
                secret = KeyRecord.combined(sealed, wrapped, recordID: recordID)
            } else if protection.hasSealedProtector, biometry != nil || protection.biometry == nil {
                do throws(KeychainError) {
                    secret = try openSealed(record, protection, device: device, deviceState, connection, biometry: biometry, path: path)
                } catch let error where error.code == .biometryInvalidated && passcode != nil {
                    secret = try record.unwrapPasscodeProtector(try device.passcodePrivateKey(passcode!, connection), path: path)
                }
            } else if protection.hasPasscodeProtector, let passcode {
                secret = try record.unwrapPasscodeProtector(try device.passcodePrivateKey(passcode, connection), path: path)
            } else {
                throw KeychainError(.interactionNotAllowed, protection.passcode && protection.biometry != nil
                                 ? "This item needs biometry or the device passcode" : protection.passcode
                                 ? "This item needs the device passcode" : "This item needs biometry")
            }
            return RecordKey(recordID: recordID, privateKey: try KeyRecord.privateKey(secret: secret, recordID: recordID),
                             startupEpoch: withStartupEpoch ? try device.tpmCall { try connection.startupEpoch() } : nil)
        } catch let error where error.code == .biometryInvalidated && !protection.hasPasscodeProtector {
            throw KeychainError(.itemInvalidated, "The biometric enrollment changed since the item was added, and the TPM no longer releases its key: it can never open again. It was kept until deleted, or purged with every other such item",
                             underlying: error)
        }
    }

    /// A record names the device that made it (its NV base) when it depends on that device's
    /// counters or passcode: another device's record is refused here, before its policy fails in
    /// a way that would read as an invalidation.
    private func checkBelongsToDevice(_ record: KeyRecord, _ deviceState: Device.State?, device: Device, path: String) throws(KeychainError) {
        guard record.nvBase != 0, record.nvBase != deviceState?.file.nvBase else { return }
        let own = deviceState.map { "this device's is 0x" + String($0.file.nvBase, radix: 16) } ?? "this user has no device state in \(device.directoryPath)"
        throw KeychainError(.interactionNotAllowed, "\(path) belongs to another device (NV base 0x\(String(record.nvBase, radix: 16)); \(own)): another user's, another member's of a shared store, or device state moved away. Only that device opens it; nothing was changed")
    }

    /// Unseals the sealed protector. On a policy failure, the counters say why.
    private func openSealed(_ record: KeyRecord, _ protection: Protection, device: Device, _ deviceState: Device.State?,
                            _ connection: TPMConnection, biometry: BiometryProof?, path: String) throws(KeychainError) -> SecretBytes {
        guard let sealed = record.sealedProtector else { throw KeychainError(.tampered, "\(path) has no sealed protector") }
        if protection.biometry != nil {
            guard let biometry else { throw KeychainError(.interactionNotAllowed, "This item needs biometry") }
            // Any change of the enrollment moves the counter before the match is honoured.
            try device.checkEnrollment(identifier: biometry.enrollmentIdentifier, connection)
        }
        do {
            // The record names this device (checked before), so its policy reads this device's indices.
            let authorizations = deviceState.map(device.nvAuthorizations) ?? [:]
            if record.flags.contains(.lockBound), let deviceState {
                try ensureUnlockedWithoutPasscode(device, deviceState, connection)
            }
            let policy = try record.sealedPolicy { (index) throws(KeychainError) in
                do {
                    return try connection.nvIndexName(index)
                } catch let error as TPMError where error.code == .handleNotFound {
                    throw Self.missingIndex(index, error)
                } catch {
                    throw KeychainError(deviceTPM: error)
                }
            }
            do {
                return try connection.unseal(sealed, policy: policy, nvAuthorizations: authorizations)
            } catch let error as TPMError where error.code == .policyCheckFailed || error.code == .nvIndexUninitialized {
                let indices = DeviceIndices(base: record.nvBase)
                if protection.biometry == .currentSet, let deviceState,
                   try device.counter(indices.enrollmentCounter, deviceState, connection) != record.enrollmentEpoch {
                    throw KeychainError(.biometryInvalidated, "The TPM refused the key: the enrollment counter moved", underlying: error)
                }
                if record.flags.contains(.lockBound) {
                    throw KeychainError(.interactionNotAllowed, "The keychain is locked: unlock it with the device passcode",
                                     underlying: error)
                }
                throw KeychainError(.tampered, "\(path): the TPM refused its sealed protector", underlying: error)
            } catch let error as TPMError where error.code == .handleNotFound {
                throw Self.missingIndex(nil, error)
            } catch let error as TPMError where error.code == .authorizationFailed && !authorizations.isEmpty {
                // PolicyNV refused the device's authorization: an index defined again by someone else.
                throw Device.taken(record.nvBase, error)
            } catch let error as TPMError where error.code == .malformedData || error.code == .wrongStorageKey {
                throw KeychainError(.tampered, "\(path): its sealed protector is damaged or belongs to another TPM", underlying: error)
            } catch {
                throw KeychainError(deviceTPM: error)
            }
        }
    }

    /// An NV index a record's policy names is not defined: undefined by someone with the TPM's
    /// owner authorization, or never defined on this TPM. It cannot be checked now, which proves nothing.
    private static func missingIndex(_ index: UInt32?, _ error: TPMError) -> KeychainError {
        let which = index.map { "NV index 0x" + String($0, radix: 16) } ?? "An NV index"
        return KeychainError(.notAvailable, "\(which) that the item's policy names is not defined on this TPM: the item cannot be checked now (nothing was changed)",
                          underlying: error)
    }

    /// A device without a passcode is always unlocked, as an iPhone without one is: its lock
    /// state is written whenever it reads locked (after a reboot).
    private func ensureUnlockedWithoutPasscode(_ device: Device, _ deviceState: Device.State, _ connection: TPMConnection) throws(KeychainError) {
        guard deviceState.file.passcode == nil else { return }
        if let lock = try device.lockState(deviceState, connection), lock.sinceBoot, lock.now { return }
        try device.writeLockState(unlocked: true, deviceState, connection)
    }

    // MARK: Purging what can never open again

    /// What ``purgeInvalidated(device:)`` removed.
    package struct Purge: Sendable, Equatable {
        package var records = 0
        package var items = 0
    }

    /// Deletes the key records this device can prove will never open again, and every item naming
    /// them. The proof is the TPM's: a counter only moves forward, so a record whose policy names
    /// an enrollment epoch below this device's enrollment counter, or whose passcode key this
    /// device removed while the passcode counter moved past its epoch, is dead for good. Records
    /// of another device, records whose counters are missing (nothing can be proven) and records
    /// with a way in left are kept.
    ///
    /// - Throws: ``KeychainError`` `.tpmUnavailable`, `.tampered`, `.storageFailed`.
    package func purgeInvalidated(device: Device) throws(KeychainError) -> Purge {
        let state = try current()
        let records = try allRecords(state)
        let dead = try device.withConnection { (connection) throws(KeychainError) -> [KeyRecord] in
            guard let deviceState = try device.state(connection) else { return [] }
            var dead: [KeyRecord] = []
            for record in records where try isProvablyDead(record, device: device, deviceState, connection) { dead.append(record) }
            return dead
        }
        var purge = Purge()
        for record in dead {
            purge.items += try deleteRecordAndItems(record)
            purge.records += 1
        }
        return purge
    }

    private func isProvablyDead(_ record: KeyRecord, device: Device, _ deviceState: Device.State, _ connection: TPMConnection) throws(KeychainError) -> Bool {
        guard record.nvBase == deviceState.file.nvBase else { return false }   // another device's, or binds none
        let protection = try record.protection()
        let indices = deviceState.indices
        // Only a counter's value, read with the device's authorization, proves anything: an index
        // someone else defined at the handle fails that read, and an ordinary one could say anything.
        func counterValue(_ index: UInt32) throws(KeychainError) -> UInt64? {
            guard try device.isCounter(index, connection) else { return nil }
            do {
                return try device.counter(index, deviceState, connection)
            } catch where error.code == .notAvailable {
                return nil
            }
        }
        var biometryGone = false
        if protection.biometry == .currentSet, let value = try counterValue(indices.enrollmentCounter) {
            biometryGone = value > record.enrollmentEpoch
        }
        var passcodeGone = false
        if case .retired(let epoch) = try device.standing(ofPasscodeKey: record.passcodeKey, connection),
           let value = try counterValue(indices.passcodeCounter) {
            passcodeGone = value > epoch
        }
        if protection.accessibility == .whenPasscodeSetThisDeviceOnly && passcodeGone { return true }
        if protection.needsBothProtectors { return biometryGone || passcodeGone }
        let sealedWayGone = protection.hasSealedProtector ? biometryGone : true
        let passcodeWayGone = protection.hasPasscodeProtector ? passcodeGone : true
        return sealedWayGone && passcodeWayGone
    }

    /// Deletes a record and every item naming it; returns how many items. Only an explicit purge
    /// calls it, never a read.
    private func deleteRecordAndItems(_ record: KeyRecord) throws(KeychainError) -> Int {
        var count = 0
        try withWriteAccess { (state) throws(KeychainError) in
            for group in try state.layout.items.entries() where !group.hasPrefix(".") {
                guard let directory = try Directory.open(group, in: state.layout.items, create: false) else { continue }
                let lock = try directory.lock(".lock", timeout: lockTimeout)
                defer { withExtendedLifetime(lock) {} }
                var removed = false
                for name in try directory.entries() where name.hasSuffix(".item") {
                    guard let file = try directory.openFile(name), file.size >= ItemFileV2.headerSize else { continue }
                    let header = try file.read(count: ItemFileV2.headerSize, at: 0)
                    if Array(header[52..<68]) == record.recordID {
                        let generation = try recordDeletion(of: name, in: directory, group: group)
                        _ = try directory.remove(name, durable: durable)
                        try recordDeletionDone(of: name, group: group, generation: generation)
                        removed = true
                        count += 1
                    }
                }
                if removed { _ = try? directory.stamp() }
            }
            if let records = try Directory.open(state.layout.records, in: rootDirectory, create: false) {
                _ = try records.remove(KeyRecord.fileName(record.recordID), durable: durable)
            }
            caches.withLock { $0 = Caches() }
        }
        return count
    }

    // MARK: Choosing or creating a record

    /// The record for new items with `protection`: an existing one when its bindings are still
    /// current, else a new one. Creating needs no person: the sealed protector's policy is known
    /// in advance, and the passcode protector wraps to the device's public passcode key.
    ///
    /// - Throws: ``KeychainError`` `.passcodeNotSet`, `.biometryNotEnrolled`, `.notAvailable`.
    func record(for protection: Protection, device: Device, enrollmentIdentifier: [UInt8]?,
                _ state: OpenState) throws(KeychainError) -> KeyRecord {
        var epoch: UInt64 = 0
        if protection.biometry == .currentSet {
            guard let enrollmentIdentifier else {
                throw KeychainError(.biometryNotEnrolled, "biometryCurrentSet binds the item to the enrolled biometry, and nothing is enrolled")
            }
            epoch = try device.enrollmentEpoch(identifier: enrollmentIdentifier).epoch   // makes the device when there is none
        }
        // An existing record is found from device.meta as read, without the TPM: adding under a
        // protection in use needs no TPM, as on iOS. Each record is authenticated under the master
        // key, so a file edited to say otherwise can only choose a record the store made. A new
        // record is made from the authenticated state.
        let seen = try binding(protection, device.peek())
        for existing in try allRecords(state) where existing.accessibility == protection.accessibility
            && existing.accessFlags == protection.flags && existing.flags.contains(.lockBound) == seen.lockBound
            && existing.enrollmentEpoch == epoch && existing.passcodeKey == seen.passcodeBytes
            && existing.nvBase == seen.deviceBase {
            return existing
        }
        let deviceState = try device.state(nil)
        let (passcodeKey, lockBound, deviceBase, passcodeBytes) = try binding(protection, deviceState?.file)
        if deviceState == nil && (lockBound || protection.biometry == .currentSet) {
            throw KeychainError(.notAvailable, "This protection needs the device's state in \(device.directoryPath), which is missing")
        }
        let recordID = randomBytes(16)
        let draft = KeyRecord(storeID: storeID, recordID: recordID, accessibility: protection.accessibility,
                              flags: lockBound ? .lockBound : [], accessFlags: protection.flags, nvBase: deviceBase,
                              enrollmentEpoch: epoch, passcodeKey: passcodeBytes, publicKey: [], sealedProtector: nil, passcodeProtector: nil)
        let (sealedSecret, wrappedSecret, secret) = try Self.recordSecrets(protection, recordID: recordID)
        let sealed: SealedObject? = try sealedSecret.map { (sealedSecret) throws(KeychainError) in
            try device.withConnection { (connection) throws(KeychainError) in
                if lockBound, let deviceState { _ = try device.lockAssertion(protection.accessibility.lockRequirement, deviceState, connection) }
                if protection.biometry == .currentSet, let deviceState {
                    _ = try device.ensureCounter(deviceState.indices.enrollmentCounter, deviceState, connection)
                }
                let policy = try draft.sealedPolicy { (index) throws(KeychainError) in try device.tpmCall { try connection.nvIndexName(index) } }
                return try device.tpmCall { try connection.seal(sealedSecret, policy: policy) }
            }
        }
        var wrapped: [UInt8]?
        if let wrappedSecret, let passcodeKey {
            do {
                wrapped = try KeyRecord.wrapForPasscode(wrappedSecret, passcodeKey: passcodeKey, storeID: storeID, recordID: recordID)
            } catch {
                throw KeychainError(.storageFailed, "Wrapping the record key failed", underlying: error)
            }
        }
        let record = KeyRecord(storeID: storeID, recordID: recordID, accessibility: draft.accessibility, flags: draft.flags,
                               accessFlags: draft.accessFlags, nvBase: draft.nvBase, enrollmentEpoch: epoch, passcodeKey: passcodeBytes,
                               publicKey: Array(try KeyRecord.privateKey(secret: secret, recordID: recordID).publicKey.rawRepresentation),
                               sealedProtector: sealed, passcodeProtector: wrapped)
        guard let directory = try Directory.open(state.layout.records, in: rootDirectory, create: true) else {
            throw KeychainError(.storageFailed, "Cannot create \(root)/\(state.layout.records)")
        }
        try directory.replace(KeyRecord.fileName(recordID), with: record.serialized(metadataKey: state.keys.metadata), durable: durable)
        caches.withLock { $0.records[recordID] = record }
        return record
    }

    /// What a record for `protection` binds to, from the device state `file`: the passcode key
    /// (zero bytes without one), whether the sealed protector checks the lock state, and the
    /// device's NV base, which names the device that made the record (for a policy on its
    /// counters, and for a record only its passcode key opens: see checkBelongsToDevice).
    ///
    /// - Throws: ``KeychainError`` `.passcodeNotSet` when the protection needs a passcode and none is set.
    private func binding(_ protection: Protection, _ file: DeviceFile?) throws(KeychainError)
        -> (passcodeKey: Curve25519.KeyAgreement.PublicKey?, lockBound: Bool, deviceBase: UInt32, passcodeBytes: [UInt8]) {
        let passcodeKey: Curve25519.KeyAgreement.PublicKey?
        do {
            passcodeKey = try file?.passcode.map { try Curve25519.KeyAgreement.PublicKey(rawRepresentation: $0.publicKey) }
        } catch {
            throw KeychainError(.tampered, "The device state holds an invalid passcode key", underlying: error)
        }
        if protection.requiresPasscodeSet && passcodeKey == nil {
            throw KeychainError(.passcodeNotSet, "This protection needs a device passcode, and none is set")
        }
        let lockBound = protection.hasSealedProtector && passcodeKey != nil && protection.accessibility.lockRequirement != .none
        let needsDevice = protection.biometry == .currentSet || lockBound || protection.needsPasscodeKey
        let passcodeBytes = passcodeKey.map { Array($0.rawRepresentation) } ?? [UInt8](repeating: 0, count: 32)
        return (passcodeKey, lockBound, needsDevice ? file?.nvBase ?? 0 : 0, passcodeBytes)
    }

    /// The secrets of a new record: what the sealed protector holds, what the passcode protector
    /// wraps, and the record secret S they give.
    private static func recordSecrets(_ protection: Protection, recordID: [UInt8]) throws(KeychainError) -> (SecretBytes?, SecretBytes?, SecretBytes) {
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
        guard let directory = try Directory.open(state.layout.records, in: rootDirectory, create: false) else { return [] }
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
    static func protectedWriteKeys(record: KeyRecord, storeID: [UInt8], itemsKey: SymmetricKey) throws(KeychainError)
        -> (salt: [UInt8], secretKey: (SymmetricKey) -> SymmetricKey) {
        do {
            let ephemeral = Curve25519.KeyAgreement.PrivateKey()
            let shared = try ephemeral.sharedSecretFromKeyAgreement(with: try Curve25519.KeyAgreement.PublicKey(rawRepresentation: record.publicKey))
            return (Array(ephemeral.publicKey.rawRepresentation), { attributesKey in
                KeyRecord.protectedSecretKey(attributesKey: attributesKey, shared: shared, recordPublicKey: record.publicKey,
                                             storeID: storeID, recordID: record.recordID)
            })
        } catch {
            throw KeychainError(.tampered, "The key record's public key is invalid", underlying: error)
        }
    }

    /// The key of a format-2 item's secret section: the attributes key, or for a protected item
    /// the record agreement mixed in.
    ///
    /// - Throws: ``KeychainError`` `.interactionNotAllowed` when the item is protected and `recordKey`
    ///   is not its record's.
    func v2SecretKey(_ header: ItemFileV2.Header, _ state: OpenState, recordKey: RecordKey?) throws(KeychainError) -> SymmetricKey {
        let attributesKey = v2ItemKey(header, state.keys)
        guard header.keyRecord != ItemFileV2.masterKeyRecord else { return attributesKey }
        guard let recordKey, recordKey.recordID == header.keyRecord else {
            throw KeychainError(.interactionNotAllowed, "The item is protected: reading its secret needs an authentication context")
        }
        let record = try keyRecord(header.keyRecord, state)
        return try recordKey.secretKeys.key(salt: header.salt) { () throws(KeychainError) in
            do {
                let shared = try recordKey.privateKey.sharedSecretFromKeyAgreement(
                    with: try Curve25519.KeyAgreement.PublicKey(rawRepresentation: header.salt))
                return KeyRecord.protectedSecretKey(attributesKey: attributesKey, shared: shared, recordPublicKey: record.publicKey,
                                                    storeID: storeID, recordID: record.recordID)
            } catch {
                throw KeychainError(.tampered, "The item's key agreement field is damaged", underlying: error)
            }
        }
    }
}

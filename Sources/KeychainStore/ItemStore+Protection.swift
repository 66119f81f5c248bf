import Crypto
import FoundationEssentials
package import KeychainVocabulary
import SystemCalls
import TPM
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

        func key(
            salt: ArraySlice<UInt8>, _ derive: () throws(KeychainError) -> SymmetricKey
        ) throws(KeychainError) -> SymmetricKey {
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
    package func value(
        _ identity: ItemIdentity, keptKey: (ItemProtection) -> RecordKey?
    ) throws(KeychainError) -> ProtectedRead {
        let found = try readFollowingRotation { (state) throws(KeychainError) -> ProtectedRead? in
            let read = try value(identity, keptKey: keptKey, state)
            if case .value(nil) = read { return nil }
            return read
        }
        return found ?? .value(nil)
    }

    private func value(
        _ identity: ItemIdentity, keptKey: (ItemProtection) -> RecordKey?, _ state: OpenState
    ) throws(KeychainError) -> ProtectedRead {
        guard state.layout.version == 2 else { return .value(try value(identity)) }
        let names = names(identity, state)
        guard let file = try openItem(names, state) else { return .value(try confirmAbsence(names, state)) }
        let bytes = try readWhole(file, version: 2)
        let header = try ItemFileV2.decodeHeader(bytes[...], fileSize: bytes.count, storeID: storeID, path: file.path)
        guard header.itemClass == .genericPassword else {
            throw KeychainError(.tampered, "\(file.path) holds another item: it was swapped or renamed")
        }
        guard
            try checkGeneration(
                header.generation, file: names.file, group: names.group, path: file.path, in: state.layout.items)
        else {
            return .value(nil)
        }
        var recordKey: RecordKey?
        if header.keyRecord != ItemFileV2.masterKeyRecord {
            let record = try keyRecord(header.keyRecord, state)
            let protection = ItemProtection(
                recordID: record.recordID, protection: try record.protection(),
                lockBound: record.flags.contains(.lockBound))
            guard let kept = keptKey(protection) else { return .needs(protection) }
            recordKey = kept
        }
        let secret = try ItemFileV2.decryptSecret(
            of: bytes, header: header, key: v2SecretKey(header, state, recordKey: recordKey),
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
        let found = try readFollowingRotation { (state) throws(KeychainError) -> ItemProtection?? in
            try protection(of: identity, state)
        }
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
        let header = try ItemFileV2.decodeHeader(
            try file.read(count: ItemFileV2.headerSize, at: 0)[...], fileSize: file.size,
            storeID: storeID, path: file.path)
        guard
            try checkGeneration(
                header.generation, file: names.file, group: names.group, path: file.path, in: state.layout.items)
        else {
            return nil
        }
        guard header.keyRecord != ItemFileV2.masterKeyRecord else { return .some(nil) }
        let record = try keyRecord(header.keyRecord, state)
        return ItemProtection(
            recordID: record.recordID, protection: try record.protection(), lockBound: record.flags.contains(.lockBound)
        )
    }

    /// A key record, read and authenticated (cached: records never change once written).
    func keyRecord(_ recordID: [UInt8], _ state: OpenState) throws(KeychainError) -> KeyRecord {
        if let cached = keyRecords.record(recordID) { return cached }
        let path = root + "/" + state.layout.records + "/" + KeyRecord.fileName(recordID)
        guard let directory = try Directory.open(state.layout.records, in: rootDirectory, create: false),
            let file = try directory.openFile(KeyRecord.fileName(recordID))
        else {
            throw KeychainError(.tampered, "\(path), the key record an item names, is missing")
        }
        guard file.size <= 8192 else { throw KeychainError(.tampered, "\(path) is too large to be a key record") }
        let record = try KeyRecord(
            parsing: try file.read(count: file.size, at: 0), storeID: storeID, metadataKey: state.keys.metadata,
            path: path)
        guard record.recordID == recordID else { throw KeychainError(.tampered, "\(path) holds another key record") }
        keyRecords.remember(record, id: recordID)
        return record
    }
}

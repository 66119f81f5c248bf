import Crypto
import FoundationEssentials
package import KeychainVocabulary
import SystemCalls
import TPM
import WireFormat

// The device's NV counters: reading, defining and asserting them, and the biometric enrollment
// epoch that moves one of them.
extension Device {
    /// A counter's value, or nil when it is not defined. The device's own indices are read with
    /// their authorization: one that someone else defined in their place fails that, and is
    /// reported as taken rather than read.
    func counter(_ index: UInt32, _ state: State, _ tpm: TPMConnection) throws(KeychainError) -> UInt64? {
        do {
            return try tpm.readNVCounter(
                index, authValue: state.indices.all.contains(index) ? state.nvAuthorization : nil)
        } catch let error as TPMError where error.code == .handleNotFound {
            return nil
        } catch let error as TPMError where error.code == .nvIndexUninitialized {
            return 0
        } catch let error as TPMError where error.code == .authorizationFailed {
            throw Self.taken(index, error)
        } catch {
            throw KeychainError(deviceTPM: error)
        }
    }

    static func taken(_ index: UInt32, _ error: TPMError) -> KeychainError {
        KeychainError(
            .notAvailable,
            "The device's NV index 0x\(String(index, radix: 16)) was undefined and defined again by someone else (it no longer accepts the device's authorization): what it guards cannot be checked. Nothing was changed",
            underlying: error)
    }

    /// Whether the index at `index` is a counter (TPM_NT_COUNTER); false when it is not defined.
    func isCounter(_ index: UInt32, _ tpm: TPMConnection) throws(KeychainError) -> Bool {
        guard let attributes = try tpmCall({ try tpm.nvIndexAttributes(index) }) else { return false }
        return (attributes >> 4) & 0xF == 1 // TPMA_NV_TPM_NT, bits 7:4 (Part 2 §13.4); TPM_NT_COUNTER = 1
    }

    /// The counter's value, defining it again (as the device defines it) when it is gone: records
    /// bound to its old values stay refused, since a new counter starts above them. An index of
    /// another shape at the handle is someone else's, and refused.
    func ensureCounter(_ index: UInt32, _ state: State, _ tpm: TPMConnection) throws(KeychainError) -> UInt64 {
        if let value = try counter(index, state, tpm), value > 0 {
            guard
                try tpmCall({ try tpm.nvIndexIsAsDefined(index, kind: .counter, options: .noDictionaryAttack) }) == true
            else {
                throw KeychainError(
                    .notAvailable,
                    "NV index 0x\(String(index, radix: 16)), the device's counter, was replaced by an index of another kind: someone else defined it. Nothing was changed"
                )
            }
            return value
        }
        try tpmCall {
            if try tpm.nvIndexAttributes(index) == nil {
                try tpm.defineNVIndex(
                    index, kind: .counter, authValue: state.nvAuthorization, options: .noDictionaryAttack)
            }
            try tpm.incrementNVCounter(index, authValue: state.nvAuthorization)
        }
        guard let value = try counter(index, state, tpm) else {
            throw KeychainError(
                .tpmUnavailable, "The TPM lost NV counter 0x\(String(index, radix: 16)) just after defining it")
        }
        return value
    }

    /// A PolicyNV assertion that the counter at `index` equals `value`. The counter is named as
    /// the device defined it (counters are written from the start), without asking the TPM: an
    /// index someone defined in its place has another name, and a policy naming ours fails on it.
    func counterAssertion(
        _ index: UInt32, equals value: UInt64, _ tpm: TPMConnection
    ) throws(KeychainError) -> PolicyAssertion {
        var operand = WireWriter()
        operand.append(value)
        let name: [UInt8]
        if let expected = tpm.expectedNVIndexName(index) {
            name = expected
        } else {
            name = try tpmCall { try tpm.nvIndexName(index) }
        }
        return .nv(index: index, indexName: name, operand: operand.bytes, offset: 0, comparison: .equal)
    }

    /// The authorizations a policy over the device's indices needs (none for version-1 indices).
    func nvAuthorizations(_ state: State) -> [UInt32: SecretBytes] {
        guard let authorization = state.nvAuthorization else { return [:] }
        return Dictionary(uniqueKeysWithValues: state.indices.all.map { ($0, authorization) })
    }

    // MARK: Biometric enrollment

    /// The enrollment counter's value for the enrollment `identifier` (nil: nothing enrolled),
    /// moving the counter first when the enrollment differs from the one last seen. Records
    /// bound to an older value are then refused by the TPM.
    ///
    /// - Returns: the counter's value after the check, and the device's NV base.
    package func enrollmentEpoch(identifier: [UInt8]?) throws(KeychainError) -> (epoch: UInt64, base: UInt32) {
        try withDevice { (state, directory, connection) throws(KeychainError) in
            (try noteEnrollment(identifier: identifier, &state, directory, connection), state.file.nvBase)
        }
    }

    /// Before a match is honoured: moves the enrollment counter when the enrollment differs from
    /// the one last seen. The common case (unchanged) reads the state and sends nothing more.
    ///
    /// - Parameter stateRead: the state as the caller read it through `connection`, so that it is
    ///   not read and authenticated again. A change noted by another process since then has moved
    ///   the counter, and the TPM refuses the record anyway.
    func checkEnrollment(
        identifier: [UInt8]?, _ connection: TPMConnection, stateRead: State? = nil
    ) throws(KeychainError) {
        let hash = Self.enrollmentHash(identifier)
        let seen: State?
        if let stateRead { seen = stateRead } else { seen = try state(connection) }
        if let seen, seen.file.enrollmentRecorded, seen.file.enrollmentHash == hash {
            return
        }
        let directory = try directory()
        let lock = try directory.lock("device.lock", timeout: tpm.timeout)
        defer { withExtendedLifetime(lock) {} }
        var state = try existingOrNew(directory, connection)
        _ = try noteEnrollment(identifier: identifier, &state, directory, connection)
    }

    /// Whether `identifier` is not the enrollment the device last noted, by its state file read
    /// without the TPM and without authentication: a hint only, so that nobody is asked to match
    /// for an item the TPM will refuse. A wrong hint costs a TPM check, or a match that the TPM
    /// then refuses, never access.
    func enrollmentLooksChanged(_ identifier: [UInt8]) -> Bool {
        guard let directory = try? Directory.open(directoryPath, in: nil, create: false),
            let file = try? directory.openFile(DeviceFile.fileName), file.size <= 16384,
            let bytes = try? file.read(count: file.size, at: 0),
            let parsed = try? DeviceFile.parse(bytes, path: file.path)
        else { return false }
        return parsed.file.enrollmentRecorded && parsed.file.enrollmentHash != Self.enrollmentHash(identifier)
    }

    private static func enrollmentHash(_ identifier: [UInt8]?) -> [UInt8] {
        identifier.map { Array(SHA256.hash(data: $0)) } ?? [UInt8](repeating: 0, count: 32)
    }

    private func noteEnrollment(
        identifier: [UInt8]?, _ state: inout State, _ directory: Directory,
        _ connection: TPMConnection
    ) throws(KeychainError) -> UInt64 {
        let hash = Self.enrollmentHash(identifier)
        let counterIndex = state.indices.enrollmentCounter
        let value = try ensureCounter(counterIndex, state, connection)
        if state.file.enrollmentRecorded && state.file.enrollmentHash == hash { return value }
        var epoch = value
        // The same enrollment, identified better now (EnrollmentIdentifier): adopted, not a change.
        let refinement = identifier.flatMap(EnrollmentIdentifier.superseded).map {
            state.file.enrollmentHash == Self.enrollmentHash($0)
        }
        if state.file.enrollmentRecorded, refinement != true {
            try tpmCall { try connection.incrementNVCounter(counterIndex, authValue: state.nvAuthorization) }
            epoch = try counter(counterIndex, state, connection) ?? value + 1
        }
        state.file.enrollmentRecorded = true
        state.file.enrollmentHash = hash
        try write(&state, as: DeviceFile.fileName, in: directory, connection)
        return epoch
    }
}

import Crypto
import Foundation
import SystemCalls
package import TPM

/// The device: a user's passcode, biometric enrollment epoch and lock state on one TPM, shared by
/// every store of that user on that TPM (as an iPhone's passcode is shared by its apps).
///
/// State lives in three NV indices (``DeviceIndices``) and one directory holding `device.meta`
/// (``DeviceFile``). The counters are what the TPM enforces with: key records name their values in
/// PolicyNV, so moving a counter invalidates every record bound to its old value, on the TPM,
/// for good (a counter defined again starts above any value it ever had).
package final class Device: Sendable {
    package let directoryPath: String
    package let tpm: TPMConfiguration
    package let indices: DeviceIndices

    /// What ``status()`` reports.
    package struct Status: Sendable {
        package var passcodeSet: Bool
        package var enrollmentRecorded: Bool
        package var enrollmentCounter: UInt64?
        package var passcodeCounter: UInt64?
        /// Unlocked since the TPM's last reset, and unlocked now (nil when the index is undefined).
        package var lockState: (sinceBoot: Bool, now: Bool)?
        package var dictionaryAttack: TPMDictionaryAttackStatus
        package var indices: DeviceIndices
    }

    /// - Parameters:
    ///   - directory: where `device.meta` lives; created 0700 when first written.
    ///   - indices: the NV handles; by default the current user's.
    package init(directory: String, tpm: TPMConfiguration, indices: DeviceIndices? = nil) {
        directoryPath = directory
        self.tpm = tpm
        self.indices = indices ?? DeviceIndices(userID: UInt32(getuid()))
    }

    // MARK: State

    /// The device state, completing a passcode change that a crash interrupted (see ``replace(_:expectingPasscodeEpoch:)``).
    func load(_ tpm: TPMConnection) throws(StoreError) -> DeviceFile {
        guard let directory = try Directory.open(directoryPath, in: nil, create: false) else { return DeviceFile(nvBase: indices.base) }
        guard let current = try read(DeviceFile.fileName, in: directory) else {
            // A next file alone is a first passcode whose rename did not happen.
            if let next = try read(DeviceFile.nextFileName, in: directory), next.passcode?.epoch == (try? counter(indices.passcodeCounter, tpm)) {
                try directory.replace(DeviceFile.fileName, with: next.serialized(), durable: true)
                _ = try directory.remove(DeviceFile.nextFileName, durable: true)
                return next
            }
            return DeviceFile(nvBase: indices.base)
        }
        if let next = try read(DeviceFile.nextFileName, in: directory) {
            // A change wrote its next state, then may or may not have moved the counter: the
            // counter decides which file is the device's state.
            let value = try counter(indices.passcodeCounter, tpm)
            if value != current.passcode?.epoch, next.passcode?.epoch == value || (next.passcode == nil && value != nil) {
                try directory.replace(DeviceFile.fileName, with: next.serialized(), durable: true)
                _ = try directory.remove(DeviceFile.nextFileName, durable: true)
                return next
            }
            _ = try directory.remove(DeviceFile.nextFileName, durable: true)
        }
        return current
    }

    private func read(_ name: String, in directory: Directory) throws(StoreError) -> DeviceFile? {
        guard let file = try directory.openFile(name) else { return nil }
        guard file.size <= 8192 else { throw StoreError(.tampered, "\(file.path) is too large to be device state") }
        let parsed = try DeviceFile(parsing: try file.read(count: file.size, at: 0), path: file.path)
        guard parsed.nvBase == indices.base else {
            throw StoreError(.tampered, "\(file.path) names NV handles 0x\(String(parsed.nvBase, radix: 16)), not this user's 0x\(String(indices.base, radix: 16))")
        }
        return parsed
    }

    private func directory() throws(StoreError) -> Directory {
        try Directory.createPath(directoryPath)
        guard let directory = try Directory.open(directoryPath, in: nil, create: true) else {
            throw StoreError(.storageFailed, "Cannot create \(directoryPath)")
        }
        return directory
    }

    /// Runs `body` holding the device's lock, with a TPM connection.
    func withDevice<R>(_ body: (Directory, TPMConnection) throws(StoreError) -> R) throws(StoreError) -> R {
        let directory = try directory()
        let lock = try directory.lock("device.lock", timeout: tpm.timeout)
        defer { withExtendedLifetime(lock) {} }
        return try withConnection { (connection) throws(StoreError) in try body(directory, connection) }
    }

    /// Runs `body` with one TPM connection. The storage key's context is cached in the device
    /// directory, so a connection loads the key rather than deriving it (seconds on some TPMs).
    package func withConnection<R>(_ body: (TPMConnection) throws(StoreError) -> R) throws(StoreError) -> R {
        let connection: TPMConnection
        do {
            let cache = (try? Directory.open(directoryPath, in: nil, create: false)).flatMap { $0 }.map(StorageKeyContextFile.init(directory:))
            connection = try TPMConnection(tpm, storageKeyContextCache: cache)
        } catch {
            throw StoreError(deviceTPM: error)
        }
        defer { connection.close() }
        return try body(connection)
    }

    /// What the device holds, for `tpm-status` and tests.
    package func status() throws(StoreError) -> Status {
        try withConnection { (connection) throws(StoreError) in
            let file = try load(connection)
            let lock = try lockState(connection)
            return Status(passcodeSet: file.passcode != nil, enrollmentRecorded: file.enrollmentRecorded,
                          enrollmentCounter: try counter(indices.enrollmentCounter, connection),
                          passcodeCounter: try counter(indices.passcodeCounter, connection), lockState: lock,
                          dictionaryAttack: try tpmCall { try connection.dictionaryAttackStatus() }, indices: indices)
        }
    }

    /// Whether a passcode is set (no TPM command).
    package func passcodeIsSet() throws(StoreError) -> Bool {
        guard let directory = try Directory.open(directoryPath, in: nil, create: false) else { return false }
        return try read(DeviceFile.fileName, in: directory)?.passcode != nil
    }

    // MARK: Counters

    /// A counter's value, or nil when it is not defined.
    func counter(_ index: UInt32, _ tpm: TPMConnection) throws(StoreError) -> UInt64? {
        do {
            return try tpm.readNVCounter(index)
        } catch let error as TPMError where error.code == .handleNotFound {
            return nil
        } catch let error as TPMError where error.code == .nvIndexUninitialized {
            return 0
        } catch {
            throw StoreError(deviceTPM: error)
        }
    }

    /// Whether the index at `index` is a counter (TPM_NT_COUNTER); false when it is not defined.
    func isCounter(_ index: UInt32, _ tpm: TPMConnection) throws(StoreError) -> Bool {
        guard let attributes = try tpmCall({ try tpm.nvIndexAttributes(index) }) else { return false }
        return (attributes >> 4) & 0xF == 1   // TPMA_NV_TPM_NT, bits 7:4 (Part 2 §13.4); TPM_NT_COUNTER = 1
    }

    /// The counter's value, defining it (NO_DA, never orderly) and writing it once when missing:
    /// PolicyNV names an index by a name that includes TPMA_NV_WRITTEN.
    func ensureCounter(_ index: UInt32, _ tpm: TPMConnection) throws(StoreError) -> UInt64 {
        if let value = try counter(index, tpm), value > 0 { return value }
        try tpmCall {
            if try tpm.nvIndexAttributes(index) == nil {
                try tpm.defineNVIndex(index, kind: .counter, options: .noDictionaryAttack)
            }
            try tpm.incrementNVCounter(index)
        }
        guard let value = try counter(index, tpm) else {
            throw StoreError(.tpmUnavailable, "The TPM lost NV counter 0x\(String(index, radix: 16)) just after defining it")
        }
        return value
    }

    /// A PolicyNV assertion that the counter at `index` equals `value`.
    func counterAssertion(_ index: UInt32, equals value: UInt64, _ tpm: TPMConnection) throws(StoreError) -> PolicyAssertion {
        var operand = WireWriter()
        operand.append(value)
        let name = try tpmCall { try tpm.nvIndexName(index) }
        return .nv(index: index, indexName: name, operand: operand.bytes, offset: 0, comparison: .equal)
    }

    // MARK: Biometric enrollment

    /// The enrollment counter's value for the enrollment `identifier` (nil: nothing enrolled),
    /// moving the counter first when the enrollment differs from the one last seen. Records
    /// bound to an older value are then refused by the TPM.
    ///
    /// - Returns: the counter's value after the check.
    package func enrollmentEpoch(identifier: [UInt8]?) throws(StoreError) -> UInt64 {
        try withDevice { (directory, connection) throws(StoreError) in
            try noteEnrollment(identifier: identifier, directory, connection)
        }
    }

    /// Before a match is honoured: moves the enrollment counter when the enrollment differs from
    /// the one last seen. The common case (unchanged) reads one file and sends nothing to the TPM.
    func checkEnrollment(identifier: [UInt8]?, _ connection: TPMConnection) throws(StoreError) {
        let hash = identifier.map { Array(SHA256.hash(data: $0)) } ?? [UInt8](repeating: 0, count: 32)
        if let directory = try Directory.open(directoryPath, in: nil, create: false), let file = try read(DeviceFile.fileName, in: directory),
           file.enrollmentRecorded, file.enrollmentHash == hash {
            return
        }
        let directory = try directory()
        let lock = try directory.lock("device.lock", timeout: tpm.timeout)
        defer { withExtendedLifetime(lock) {} }
        _ = try noteEnrollment(identifier: identifier, directory, connection)
    }

    private func noteEnrollment(identifier: [UInt8]?, _ directory: Directory, _ connection: TPMConnection) throws(StoreError) -> UInt64 {
        let hash = identifier.map { Array(SHA256.hash(data: $0)) } ?? [UInt8](repeating: 0, count: 32)
        var file = try load(connection)
        let value = try ensureCounter(indices.enrollmentCounter, connection)
        if file.enrollmentRecorded && file.enrollmentHash == hash { return value }
        var epoch = value
        if file.enrollmentRecorded {
            try tpmCall { try connection.incrementNVCounter(indices.enrollmentCounter) }
            epoch = try counter(indices.enrollmentCounter, connection) ?? value + 1
        }
        file.enrollmentRecorded = true
        file.enrollmentHash = hash
        try directory.replace(DeviceFile.fileName, with: file.serialized(), durable: true)
        return epoch
    }

    // MARK: Passcode

    /// Sets the first passcode.
    ///
    /// - Throws: ``StoreError`` `.duplicateItem` when one is set (change it instead), `.invalidParameter`.
    package func setPasscode(_ passcode: SecretBytes) throws(StoreError) {
        try Self.validate(passcode)
        try withDevice { (directory, connection) throws(StoreError) in
            var file = try load(connection)
            guard file.passcode == nil else {
                throw StoreError(.duplicateItem, "A device passcode is already set; change it with the current one")
            }
            let epoch = try ensureCounter(indices.passcodeCounter, connection)
            let seed = try tpmCall { try connection.randomBytes(count: 32) }
            file.passcode = try sealPasscodeKey(seed: seed, passcode: passcode, epoch: epoch, connection)
            try directory.replace(DeviceFile.fileName, with: file.serialized(), durable: true)
            try writeLockState(unlocked: true, connection)
        }
    }

    /// Changes the passcode: one sealed object is replaced, no item or key record is rewritten,
    /// and the passcode counter moves so that an old copy of the sealed key no longer opens.
    ///
    /// - Throws: ``StoreError`` `.passcodeNotSet`, `.authenticationFailed` (wrong passcode, counted
    ///   by the TPM's dictionary-attack protection), `.lockout`.
    package func changePasscode(from old: SecretBytes, to new: SecretBytes) throws(StoreError) {
        try Self.validate(new)
        try replacePasscode(old) { (file, seed, epoch, connection) throws(StoreError) in
            file.passcode = try sealPasscodeKey(seed: seed, passcode: new, epoch: epoch, connection)
        }
    }

    /// Removes the passcode. Items that require it (devicePasscode without another way in, and
    /// whenPasscodeSetThisDeviceOnly) become unreadable for good.
    ///
    /// - Throws: as ``changePasscode(from:to:)``.
    package func removePasscode(_ old: SecretBytes) throws(StoreError) {
        try replacePasscode(old) { (file, _, _, _) throws(StoreError) in file.passcode = nil }
    }

    /// Verifies `old`, writes the next state (``DeviceFile/nextFileName``), moves the passcode
    /// counter, then renames the next state into place. A crash at any point leaves either the
    /// old passcode working (the counter did not move) or the new state ready for ``load(_:)``.
    private func replacePasscode(_ old: SecretBytes,
                                 _ change: (inout DeviceFile, SecretBytes, UInt64, TPMConnection) throws(StoreError) -> Void) throws(StoreError) {
        try withDevice { (directory, connection) throws(StoreError) in
            var file = try load(connection)
            guard let current = file.passcode else {
                throw StoreError(.passcodeNotSet, "No device passcode is set")
            }
            let seed = try openPasscodeKey(current, passcode: old, connection)
            try change(&file, seed, current.epoch + 1, connection)
            // A change keeps the key (the same seed, sealed again); a removal retires it.
            if file.passcode?.publicKey != current.publicKey { file.retire(current) }
            try directory.replace(DeviceFile.nextFileName, with: file.serialized(), durable: true)
            try tpmCall { try connection.incrementNVCounter(indices.passcodeCounter) }
            try directory.replace(DeviceFile.fileName, with: file.serialized(), durable: true)
            _ = try directory.remove(DeviceFile.nextFileName, durable: true)
            try writeLockState(unlocked: true, connection)
        }
    }

    /// The passcode key's public half, which key records wrap their keys to (nil without a passcode).
    func passcodePublicKey() throws(StoreError) -> Curve25519.KeyAgreement.PublicKey? {
        guard let directory = try Directory.open(directoryPath, in: nil, create: false),
              let bytes = try read(DeviceFile.fileName, in: directory)?.passcode?.publicKey else { return nil }
        do {
            return try Curve25519.KeyAgreement.PublicKey(rawRepresentation: bytes)
        } catch {
            throw StoreError(.tampered, "\(directoryPath)/\(DeviceFile.fileName) holds an invalid passcode key")
        }
    }

    /// What this device's state says of a passcode key a key record was wrapped to.
    package enum PasscodeKeyStanding: Sendable, Equatable {
        /// The device's passcode key now.
        case current
        /// A key this device removed; the TPM's passcode counter moved past `epoch` when it did.
        case retired(epoch: UInt64)
        /// Not a key of this device state: another member's device, another state directory.
        case unknown
    }

    /// - Throws: ``StoreError`` `.tampered` when `device.meta` is damaged.
    package func standing(ofPasscodeKey publicKey: [UInt8]) throws(StoreError) -> PasscodeKeyStanding {
        guard let directory = try Directory.open(directoryPath, in: nil, create: false),
              let file = try read(DeviceFile.fileName, in: directory) else { return .unknown }
        if let current = file.passcode, current.publicKey == publicKey { return .current }
        if let retired = file.retiredPasscodeKeys.last(where: { $0.publicKey == publicKey }) { return .retired(epoch: retired.epoch) }
        return .unknown
    }

    /// The passcode key's private half: the TPM checks the passcode (one try counted toward its
    /// dictionary-attack lockout when wrong) and the passcode counter.
    ///
    /// - Throws: ``StoreError`` `.passcodeNotSet`, `.authenticationFailed`, `.lockout`, `.itemInvalidated`
    ///   (the sealed key's epoch is gone: a file put back from before a change).
    func passcodePrivateKey(_ passcode: SecretBytes) throws(StoreError) -> Curve25519.KeyAgreement.PrivateKey {
        try withConnection { (connection) throws(StoreError) in try passcodePrivateKey(passcode, connection) }
    }

    func passcodePrivateKey(_ passcode: SecretBytes, _ connection: TPMConnection) throws(StoreError) -> Curve25519.KeyAgreement.PrivateKey {
        guard let current = try load(connection).passcode else {
            throw StoreError(.passcodeNotSet, "No device passcode is set")
        }
        return try Self.agreementKey(seed: try openPasscodeKey(current, passcode: passcode, connection))
    }

    /// Verifies the passcode and unlocks the device (the lock-state index reads unlocked).
    package func unlock(passcode: SecretBytes) throws(StoreError) {
        _ = try passcodePrivateKey(passcode)
        try withConnection { (connection) throws(StoreError) in try writeLockState(unlocked: true, connection) }
    }

    /// Locks the device: whenUnlocked items are refused by the TPM until the next unlock.
    ///
    /// - Throws: ``StoreError`` `.passcodeNotSet`: a device without a passcode cannot be locked.
    package func lock() throws(StoreError) {
        guard try passcodeIsSet() else {
            throw StoreError(.passcodeNotSet, "A keychain without a device passcode is always unlocked: set a passcode first")
        }
        try withConnection { (connection) throws(StoreError) in try writeLockState(unlocked: false, connection) }
    }

    static func agreementKey(seed: SecretBytes) throws(StoreError) -> Curve25519.KeyAgreement.PrivateKey {
        do {
            return try seed.withUnsafeBytes { try Curve25519.KeyAgreement.PrivateKey(rawRepresentation: $0) }
        } catch {
            throw StoreError(.tampered, "The device passcode key is damaged", underlying: error)
        }
    }

    private func sealPasscodeKey(seed: SecretBytes, passcode: SecretBytes, epoch: UInt64,
                                 _ connection: TPMConnection) throws(StoreError) -> DeviceFile.PasscodeKey {
        let salt = randomBytes(32)
        let policy = Policy([.authValue, try counterAssertion(indices.passcodeCounter, equals: epoch, connection), .unsealOnly])
        let sealed = try tpmCall {
            try connection.seal(seed, policy: policy, authValue: DeviceFile.authValue(passcode: passcode, salt: salt))
        }
        let publicKey = try Self.agreementKey(seed: seed).publicKey.rawRepresentation
        return DeviceFile.PasscodeKey(salt: salt, epoch: epoch, publicKey: Array(publicKey), sealedSeed: sealed)
    }

    private func openPasscodeKey(_ key: DeviceFile.PasscodeKey, passcode: SecretBytes,
                                 _ connection: TPMConnection) throws(StoreError) -> SecretBytes {
        let policy = Policy([.authValue, try counterAssertion(indices.passcodeCounter, equals: key.epoch, connection), .unsealOnly])
        do {
            return try connection.unseal(key.sealedSeed, policy: policy, authValue: DeviceFile.authValue(passcode: passcode, salt: key.salt))
        } catch let error as TPMError {
            switch error.code {
            case .authorizationFailed:
                throw StoreError(.authenticationFailed, "Wrong device passcode (the TPM counted this try toward its dictionary-attack lockout)", underlying: error)
            case .policyCheckFailed:
                throw StoreError(.itemInvalidated, "The device passcode key in \(directoryPath) belongs to an older passcode (the passcode counter moved on): it was restored from a backup or replaced", underlying: error)
            default:
                throw StoreError(deviceTPM: error)
            }
        } catch {
            throw StoreError(deviceTPM: error)
        }
    }

    private static func validate(_ passcode: SecretBytes) throws(StoreError) {
        guard passcode.count >= 4, passcode.count <= 1024 else {
            throw StoreError(.invalidParameter, "A device passcode has 4 to 1024 bytes, not \(passcode.count)")
        }
    }

    // MARK: Lock state

    /// The lock-state index's bytes, or nil when it is not defined.
    func lockState(_ connection: TPMConnection) throws(StoreError) -> (sinceBoot: Bool, now: Bool)? {
        do {
            let bytes = try connection.readPublicNV(indices.lockState, count: 2)
            return (bytes[0] == 1, bytes[1] == 1)
        } catch let error as TPMError where error.code == .handleNotFound {
            return nil
        } catch let error as TPMError where error.code == .nvIndexUninitialized {
            return (false, false)
        } catch {
            throw StoreError(deviceTPM: error)
        }
    }

    /// Writes the lock state, defining the index (2 bytes, CLEAR_STCLEAR, NO_DA) when missing,
    /// and touches the lock stamp so that reuse windows in every process see the change.
    func writeLockState(unlocked: Bool, _ connection: TPMConnection) throws(StoreError) {
        try tpmCall {
            if try connection.nvIndexAttributes(indices.lockState) == nil {
                try connection.defineNVIndex(indices.lockState, kind: .ordinary(size: 2), options: [.noDictionaryAttack, .clearedAtStartup])
            }
            try connection.writeNV(indices.lockState, data: SecretBytes(copying: [1, unlocked ? 1 : 0]))
        }
        try directory().replace(Self.lockStampName, with: Array(String(UInt64(Date().timeIntervalSince1970 * 1e9)).utf8), durable: false)
    }

    /// `lock.stamp`: rewritten at every lock and unlock. Its identity (inode, modification time) is
    /// what a reuse window compares, at the cost of one stat, instead of asking the TPM per read.
    static let lockStampName = "lock.stamp"

    /// The lock stamp's identity now (nil when the device was never locked or unlocked).
    package func lockStamp() -> [Int64]? {
        var status = stat()
        guard stat(directoryPath + "/" + Self.lockStampName, &status) == 0 else { return nil }
        return [Int64(status.st_ino), Int64(status.st_mtim.tv_sec), Int64(status.st_mtim.tv_nsec)]
    }

    /// Whether the lock state satisfies `requirement` now (one NV read): what a reuse window
    /// checks, since a key kept in memory must not outlive a lock.
    package func lockSatisfies(_ requirement: LockRequirement) throws(StoreError) -> Bool {
        // Without a passcode the device is always unlocked (a read writes the state when needed).
        guard requirement != .none, try passcodeIsSet() else { return true }
        return try withConnection { (connection) throws(StoreError) in
            guard let state = try lockState(connection) else { return false }
            return requirement == .unlocked ? state.sinceBoot && state.now : state.sinceBoot
        }
    }

    /// A PolicyNV assertion on the lock state: byte 0 (`sinceBoot`) or 1 equal to 1.
    func lockAssertion(_ requirement: LockRequirement, _ connection: TPMConnection) throws(StoreError) -> PolicyAssertion? {
        guard requirement != .none else { return nil }
        if try lockState(connection) == nil { try writeLockState(unlocked: true, connection) }
        let name = try tpmCall { try connection.nvIndexName(indices.lockState) }
        return .nv(index: indices.lockState, indexName: name, operand: [1], offset: requirement == .unlocked ? 1 : 0, comparison: .equal)
    }

    func tpmCall<R>(_ body: () throws -> R) throws(StoreError) -> R {
        do {
            return try body()
        } catch let error as StoreError {
            throw error
        } catch {
            throw StoreError(deviceTPM: error)
        }
    }
}

extension StoreError {
    /// A TPM failure during a device operation.
    package init(deviceTPM error: any Error) {
        guard let error = error as? TPMError else {
            self.init(.tpmUnavailable, "The TPM failed", underlying: error)
            return
        }
        switch error.code {
        case .tpmUnavailable: self.init(.tpmUnavailable, "The TPM cannot be reached", underlying: error)
        case .busy, .timedOut: self.init(.timedOut, "The TPM did not answer in time", underlying: error)
        case .lockout: self.init(.lockout, "The TPM is in dictionary-attack lockout: wait for it to recover, or run `tpm-keychain reset-lockout`", underlying: error)
        case .authorizationFailed: self.init(.authenticationFailed, "The TPM refused the authorization", underlying: error)
        case .ownerAuthorizationFailed: self.init(.authenticationFailed, error.message, underlying: error)
        case .outOfResources: self.init(.notAvailable, "The TPM has no room for another NV index or object; free one (tpm2_nvundefine) or clear the TPM", underlying: error)
        default: self.init(.tpmUnavailable, "The TPM failed: \(error.message)", underlying: error)
        }
    }
}

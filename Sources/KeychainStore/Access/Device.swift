import Crypto
import Foundation
import SystemCalls
package import TPM
package import KeychainVocabulary

/// The device: a user's passcode, biometric enrollment epoch and lock state on one TPM, shared by
/// every store of that user on that TPM (as an iPhone's passcode is shared by its apps).
///
/// State lives in three NV indices (``DeviceIndices``) and one directory holding `device.meta`
/// (``DeviceFile``). The counters are what the TPM enforces with: key records name their values in
/// PolicyNV, so moving a counter invalidates every record bound to its old value, on the TPM,
/// for good (a counter defined again starts above any value it ever had).
///
/// A device is made on first need: a random secret sealed to the TPM (which authenticates
/// `device.meta` and is the indices' authorization value, so that no other TPM user can move,
/// write or stand in for them) and three indices at random handles.
package final class Device: Sendable {
    package let directoryPath: String
    package let tpm: TPMConfiguration
    /// The handles a version-1 device of this user had, for reading one.
    private let legacyIndices: DeviceIndices

    /// What ``status()`` reports.
    package struct Status: Sendable {
        package var passcodeSet: Bool
        package var enrollmentRecorded: Bool
        package var enrollmentCounter: UInt64?
        package var passcodeCounter: UInt64?
        /// Unlocked since the TPM's last reset, and unlocked now (nil when the index is undefined).
        package var lockState: (sinceBoot: Bool, now: Bool)?
        package var dictionaryAttack: TPMDictionaryAttackStatus
        /// Nil before the device is made.
        package var indices: DeviceIndices?
        /// Version 1's indices: handles from the user ID, open to every TPM user.
        package var legacyIndices: Bool
    }

    /// The device's state, authenticated, and what it yields.
    struct State: Sendable {
        var file: DeviceFile
        /// The device secret (nil only for version-1 state, which nothing authenticates).
        let secret: SecretBytes?

        var indices: DeviceIndices { DeviceIndices(base: file.nvBase) }

        /// The indices' authorization value (nil for version-1 indices).
        var nvAuthorization: SecretBytes? {
            guard !file.legacyIndices, let secret else { return nil }
            return DeviceFile.nvAuthorization(secret: secret)
        }
    }

    /// - Parameter directory: where `device.meta` lives; created 0700 when first written.
    package init(directory: String, tpm: TPMConfiguration) {
        directoryPath = directory
        self.tpm = tpm
        legacyIndices = DeviceIndices(legacyUserID: UInt32(getuid()))
    }

    // MARK: State

    /// Device secrets unsealed in this process, by directory, with the sealed bytes they came
    /// from: one unseal per process and device.
    private static let secrets = Locked<[String: (sealed: [UInt8], secret: SecretBytes)]>([:])

    /// The device's state, authenticated, or nil before the device is made; completes a passcode
    /// change that a crash interrupted (see ``replacePasscode(_:_:)``).
    ///
    /// - Throws: ``KeychainError`` `.tampered` when `device.meta` fails authentication or belongs to
    ///   another TPM.
    func state(_ connection: TPMConnection) throws(KeychainError) -> State? {
        guard let directory = try Directory.open(directoryPath, in: nil, create: false) else { return nil }
        guard let current = try read(DeviceFile.fileName, in: directory, connection) else {
            // A next file alone is a first passcode whose rename did not happen.
            if var next = try read(DeviceFile.nextFileName, in: directory, connection),
               next.file.passcode?.epoch == (try? counter(next.indices.passcodeCounter, next, connection)) {
                try adopt(&next, directory, connection)
                return next
            }
            return nil
        }
        if var next = try read(DeviceFile.nextFileName, in: directory, connection), next.file.nvBase == current.file.nvBase {
            // A change wrote its next state, then may or may not have moved the counter: the
            // counter decides which file is the device's state.
            let value = try counter(current.indices.passcodeCounter, current, connection)
            if value != current.file.passcode?.epoch, next.file.passcode?.epoch == value || (next.file.passcode == nil && value != nil) {
                try adopt(&next, directory, connection)
                return next
            }
        }
        _ = try directory.remove(DeviceFile.nextFileName, durable: true)
        return current
    }

    private func adopt(_ next: inout State, _ directory: Directory, _ connection: TPMConnection) throws(KeychainError) {
        try write(&next, as: DeviceFile.fileName, in: directory, connection)
        _ = try directory.remove(DeviceFile.nextFileName, durable: true)
    }

    /// The state in `name`, authenticated with the device secret (unsealed once per process).
    private func read(_ name: String, in directory: Directory, _ connection: TPMConnection) throws(KeychainError) -> State? {
        guard let file = try directory.openFile(name) else { return nil }
        guard file.size <= 16384 else { throw KeychainError(.tampered, "\(file.path) is too large to be device state") }
        let parsed = try DeviceFile.parse(try file.read(count: file.size, at: 0), path: file.path)
        guard let sealed = parsed.file.sealedSecret else {
            // Version 1: nothing to authenticate with; its handles are the user's.
            guard parsed.file.nvBase == legacyIndices.base else {
                throw KeychainError(.tampered, "\(file.path) names NV handles 0x\(String(parsed.file.nvBase, radix: 16)), not this user's 0x\(String(legacyIndices.base, radix: 16))")
            }
            return State(file: parsed.file, secret: nil)
        }
        let secret = try unsealSecret(sealed, connection, path: file.path)
        try parsed.authenticate(secret: secret, path: file.path)
        return State(file: parsed.file, secret: secret)
    }

    private func unsealSecret(_ sealed: SealedObject, _ connection: TPMConnection, path: String) throws(KeychainError) -> SecretBytes {
        let bytes = sealed.serialized()
        if let cached = Self.secrets.withLock({ $0[directoryPath] }), cached.sealed == bytes { return cached.secret }
        let secret: SecretBytes
        do {
            secret = try connection.unseal(sealed)
        } catch let error as TPMError where error.code == .malformedData || error.code == .wrongStorageKey || error.code == .policyCheckFailed {
            throw KeychainError(.tampered, "\(path) holds a device secret this TPM does not unseal: it belongs to another TPM, or was damaged", underlying: error)
        } catch {
            throw KeychainError(deviceTPM: error)
        }
        Self.secrets.withLock { $0[directoryPath] = (bytes, secret) }
        return secret
    }

    /// Writes `state`. A version-1 state gets its secret at its first write (its indices stay as
    /// they are), made on the connection the caller holds: a second one would wait for the first
    /// on a TPM without resource manager.
    private func write(_ state: inout State, as name: String, in directory: Directory, _ connection: TPMConnection) throws(KeychainError) {
        if state.secret == nil {
            let made = try tpmCall { try connection.generateSealedKey() }
            state.file.sealedSecret = made.sealed
            state = State(file: state.file, secret: made.key)
            Self.secrets.withLock { $0[directoryPath] = (made.sealed.serialized(), made.key) }
        }
        guard let secret = state.secret else { return }
        try directory.replace(name, with: state.file.serialized(secret: secret), durable: true)
    }

    private func directory() throws(KeychainError) -> Directory {
        try Directory.createPath(directoryPath)
        guard let directory = try Directory.open(directoryPath, in: nil, create: true) else {
            throw KeychainError(.storageFailed, "Cannot create \(directoryPath)")
        }
        return directory
    }

    /// Runs `body` holding the device's lock, with a TPM connection and the device's state,
    /// making the device first when there is none.
    func withDevice<R>(_ body: (inout State, Directory, TPMConnection) throws(KeychainError) -> R) throws(KeychainError) -> R {
        let directory = try directory()
        let lock = try directory.lock("device.lock", timeout: tpm.timeout)
        defer { withExtendedLifetime(lock) {} }
        return try withConnection { (connection) throws(KeychainError) in
            var state = try existingOrNew(directory, connection)
            return try body(&state, directory, connection)
        }
    }

    private func existingOrNew(_ directory: Directory, _ connection: TPMConnection) throws(KeychainError) -> State {
        if let state = try state(connection) { return state }
        return try makeDevice(directory, connection)
    }

    /// Runs `body` with one TPM connection. The storage key's context is cached in the device
    /// directory, so a connection loads the key rather than deriving it (seconds on some TPMs).
    package func withConnection<R>(_ body: (TPMConnection) throws(KeychainError) -> R) throws(KeychainError) -> R {
        let connection: TPMConnection
        do {
            let cache = (try? Directory.open(directoryPath, in: nil, create: false)).flatMap { $0 }.map(StorageKeyContextFile.init(directory:))
            connection = try TPMConnection(tpm, storageKeyContextCache: cache)
        } catch {
            throw KeychainError(deviceTPM: error)
        }
        defer { connection.close() }
        return try body(connection)
    }

    /// The state, opening a connection when none is given; nil before the device is made.
    func state(_ connection: TPMConnection?) throws(KeychainError) -> State? {
        if let connection { return try state(connection) }
        // No TPM needed when there is no state at all.
        guard let directory = try Directory.open(directoryPath, in: nil, create: false) else { return nil }
        let current = try directory.inode(of: DeviceFile.fileName)
        let next = try directory.inode(of: DeviceFile.nextFileName)
        guard current != nil || next != nil else { return nil }
        return try withConnection { (connection) throws(KeychainError) in try state(connection) }
    }

    // MARK: Making the device

    /// How many random bases are tried before giving up: each is three handles in a range of
    /// a million, so only a TPM whose range someone filled runs out.
    static let handleAttempts = 16

    /// Makes the device: its secret sealed to the TPM, and its three indices defined at a random
    /// base with the secret's authorization, counters written once (PolicyNV names an index by
    /// a name that includes TPMA_NV_WRITTEN). A base with any handle taken is given up whole.
    private func makeDevice(_ directory: Directory, _ connection: TPMConnection) throws(KeychainError) -> State {
        let (secret, sealed) = try tpmCall { try connection.generateSealedKey() }
        let authorization = DeviceFile.nvAuthorization(secret: secret)
        for _ in 0..<Self.handleAttempts {
            let indices = DeviceIndices.random()
            guard try defineIndices(indices, authorization, connection) else { continue }
            var state = State(file: DeviceFile(nvBase: indices.base, legacyIndices: false, sealedSecret: sealed), secret: secret)
            try write(&state, as: DeviceFile.fileName, in: directory, connection)
            Self.secrets.withLock { $0[directoryPath] = (sealed.serialized(), secret) }
            return state
        }
        throw KeychainError(.notAvailable, "No free NV handles for the device's indices in 0x01800000-0x01BFFFFF after \(Self.handleAttempts) tries: free some (tpm2_getcap handles-nv-index)")
    }

    /// Defines the three indices; false (and nothing left defined) when a handle is taken.
    private func defineIndices(_ indices: DeviceIndices, _ authorization: SecretBytes, _ connection: TPMConnection) throws(KeychainError) -> Bool {
        var defined: [UInt32] = []
        do {
            for counter in [indices.enrollmentCounter, indices.passcodeCounter] {
                try connection.defineNVIndex(counter, kind: .counter, authValue: authorization, options: .noDictionaryAttack)
                defined.append(counter)
                try connection.incrementNVCounter(counter, authValue: authorization)
            }
            try connection.defineNVIndex(indices.lockState, kind: .ordinary(size: 2), authValue: authorization, options: Self.lockStateOptions)
            return true
        } catch let error as TPMError where error.code == .nvIndexAlreadyDefined {
            for index in defined { try? connection.undefineNVIndex(index) }
            return false
        } catch {
            for index in defined { try? connection.undefineNVIndex(index) }
            throw KeychainError(deviceTPM: error)
        }
    }

    static let lockStateOptions: NVIndexOptions = [.noDictionaryAttack, .clearedAtStartup]

    // MARK: Status

    /// What the device holds, for `tpm-status` and tests (makes nothing).
    package func status() throws(KeychainError) -> Status {
        try withConnection { (connection) throws(KeychainError) in
            let state = try state(connection)
            return Status(passcodeSet: state?.file.passcode != nil, enrollmentRecorded: state?.file.enrollmentRecorded ?? false,
                          enrollmentCounter: try state.flatMap { (state) throws(KeychainError) in try counter(state.indices.enrollmentCounter, state, connection) },
                          passcodeCounter: try state.flatMap { (state) throws(KeychainError) in try counter(state.indices.passcodeCounter, state, connection) },
                          lockState: try state.flatMap { (state) throws(KeychainError) in try lockState(state, connection) },
                          dictionaryAttack: try tpmCall { try connection.dictionaryAttackStatus() }, indices: state?.indices,
                          legacyIndices: state?.file.legacyIndices ?? false)
        }
    }

    /// `device.meta` as read, without the TPM and so without authentication (nil when absent):
    /// for what only adds protection or only finds something authenticated elsewhere.
    func peek() throws(KeychainError) -> DeviceFile? {
        guard let directory = try Directory.open(directoryPath, in: nil, create: false),
              let file = try directory.openFile(DeviceFile.fileName) else { return nil }
        guard file.size <= 16384 else { throw KeychainError(.tampered, "\(file.path) is too large to be device state") }
        return try DeviceFile.parse(try file.read(count: file.size, at: 0), path: file.path).file
    }

    /// Whether `device.meta` says a passcode is set: read without the TPM, so not authenticated.
    /// For choices that only add protection or decide what to ask a person (whether a new item
    /// gets a key record, whether to offer the passcode); every decision that opens something
    /// reads the authenticated state instead. A file edited to say otherwise only makes new items
    /// unprotected, as deleting the device state does, or fails authentication where it is used.
    package func passcodeIsSet() throws(KeychainError) -> Bool {
        try peek()?.passcode != nil
    }

    /// The device's NV base, which names it in key records; nil before the device is made.
    func base(_ connection: TPMConnection?) throws(KeychainError) -> UInt32? {
        try state(connection)?.file.nvBase
    }

    // MARK: Counters

    /// A counter's value, or nil when it is not defined. The device's own indices are read with
    /// their authorization: one that someone else defined in their place fails that, and is
    /// reported as taken rather than read.
    func counter(_ index: UInt32, _ state: State, _ tpm: TPMConnection) throws(KeychainError) -> UInt64? {
        do {
            return try tpm.readNVCounter(index, authValue: state.indices.all.contains(index) ? state.nvAuthorization : nil)
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
        KeychainError(.notAvailable, "The device's NV index 0x\(String(index, radix: 16)) was undefined and defined again by someone else (it no longer accepts the device's authorization): what it guards cannot be checked. Nothing was changed",
                   underlying: error)
    }

    /// Whether the index at `index` is a counter (TPM_NT_COUNTER); false when it is not defined.
    func isCounter(_ index: UInt32, _ tpm: TPMConnection) throws(KeychainError) -> Bool {
        guard let attributes = try tpmCall({ try tpm.nvIndexAttributes(index) }) else { return false }
        return (attributes >> 4) & 0xF == 1   // TPMA_NV_TPM_NT, bits 7:4 (Part 2 §13.4); TPM_NT_COUNTER = 1
    }

    /// The counter's value, defining it again (as the device defines it) when it is gone: records
    /// bound to its old values stay refused, since a new counter starts above them. An index of
    /// another shape at the handle is someone else's, and refused.
    func ensureCounter(_ index: UInt32, _ state: State, _ tpm: TPMConnection) throws(KeychainError) -> UInt64 {
        if let value = try counter(index, state, tpm), value > 0 {
            guard try tpmCall({ try tpm.nvIndexIsAsDefined(index, kind: .counter, options: .noDictionaryAttack) }) == true else {
                throw KeychainError(.notAvailable, "NV index 0x\(String(index, radix: 16)), the device's counter, was replaced by an index of another kind: someone else defined it. Nothing was changed")
            }
            return value
        }
        try tpmCall {
            if try tpm.nvIndexAttributes(index) == nil {
                try tpm.defineNVIndex(index, kind: .counter, authValue: state.nvAuthorization, options: .noDictionaryAttack)
            }
            try tpm.incrementNVCounter(index, authValue: state.nvAuthorization)
        }
        guard let value = try counter(index, state, tpm) else {
            throw KeychainError(.tpmUnavailable, "The TPM lost NV counter 0x\(String(index, radix: 16)) just after defining it")
        }
        return value
    }

    /// A PolicyNV assertion that the counter at `index` equals `value`.
    func counterAssertion(_ index: UInt32, equals value: UInt64, _ tpm: TPMConnection) throws(KeychainError) -> PolicyAssertion {
        var operand = WireWriter()
        operand.append(value)
        let name = try tpmCall { try tpm.nvIndexName(index) }
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
    func checkEnrollment(identifier: [UInt8]?, _ connection: TPMConnection) throws(KeychainError) {
        let hash = Self.enrollmentHash(identifier)
        if let state = try state(connection), state.file.enrollmentRecorded, state.file.enrollmentHash == hash { return }
        let directory = try directory()
        let lock = try directory.lock("device.lock", timeout: tpm.timeout)
        defer { withExtendedLifetime(lock) {} }
        var state = try existingOrNew(directory, connection)
        _ = try noteEnrollment(identifier: identifier, &state, directory, connection)
    }

    private static func enrollmentHash(_ identifier: [UInt8]?) -> [UInt8] {
        identifier.map { Array(SHA256.hash(data: $0)) } ?? [UInt8](repeating: 0, count: 32)
    }

    private func noteEnrollment(identifier: [UInt8]?, _ state: inout State, _ directory: Directory,
                                _ connection: TPMConnection) throws(KeychainError) -> UInt64 {
        let hash = Self.enrollmentHash(identifier)
        let counterIndex = state.indices.enrollmentCounter
        let value = try ensureCounter(counterIndex, state, connection)
        if state.file.enrollmentRecorded && state.file.enrollmentHash == hash { return value }
        var epoch = value
        if state.file.enrollmentRecorded {
            try tpmCall { try connection.incrementNVCounter(counterIndex, authValue: state.nvAuthorization) }
            epoch = try counter(counterIndex, state, connection) ?? value + 1
        }
        state.file.enrollmentRecorded = true
        state.file.enrollmentHash = hash
        try write(&state, as: DeviceFile.fileName, in: directory, connection)
        return epoch
    }

    // MARK: Passcode

    /// Sets the first passcode.
    ///
    /// - Throws: ``KeychainError`` `.duplicateItem` when one is set (change it instead), `.invalidParameter`.
    package func setPasscode(_ passcode: SecretBytes) throws(KeychainError) {
        try Self.validate(passcode)
        try withDevice { (state, directory, connection) throws(KeychainError) in
            guard state.file.passcode == nil else {
                throw KeychainError(.duplicateItem, "A device passcode is already set; change it with the current one")
            }
            let epoch = try ensureCounter(state.indices.passcodeCounter, state, connection)
            let seed = try randomSeed(connection)
            state.file.passcode = try sealPasscodeKey(seed: seed, passcode: passcode, epoch: epoch, state, connection)
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
        let key = fromSystem.withUnsafeBytes { system in
            fromTPM.withUnsafeBytes { tpm in
                HKDF<SHA256>.deriveKey(inputKeyMaterial: SymmetricKey(data: Array(system) + Array(tpm)),
                                       info: Array("TPMKeychain passcode key seed".utf8), outputByteCount: 32)
            }
        }
        return key.withUnsafeBytes { SecretBytes(copying: $0) }
    }

    /// Changes the passcode: one sealed object is replaced, no item or key record is rewritten,
    /// and the passcode counter moves so that an old copy of the sealed key no longer opens.
    ///
    /// - Throws: ``KeychainError`` `.passcodeNotSet`, `.authenticationFailed` (wrong passcode, counted
    ///   by the TPM's dictionary-attack protection), `.lockout`.
    package func changePasscode(from old: SecretBytes, to new: SecretBytes) throws(KeychainError) {
        try Self.validate(new)
        try replacePasscode(old) { (state, seed, epoch, connection) throws(KeychainError) in
            state.file.passcode = try sealPasscodeKey(seed: seed, passcode: new, epoch: epoch, state, connection)
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
    private func replacePasscode(_ old: SecretBytes,
                                 _ change: (inout State, SecretBytes, UInt64, TPMConnection) throws(KeychainError) -> Void) throws(KeychainError) {
        try withDevice { (state, directory, connection) throws(KeychainError) in
            guard let current = state.file.passcode else {
                throw KeychainError(.passcodeNotSet, "No device passcode is set")
            }
            let seed = try openPasscodeKey(current, passcode: old, state, connection)
            try change(&state, seed, current.epoch + 1, connection)
            // A change keeps the key (the same seed, sealed again); a removal retires it.
            if state.file.passcode?.publicKey != current.publicKey { state.file.retire(current) }
            try write(&state, as: DeviceFile.nextFileName, in: directory, connection)
            try tpmCall { try connection.incrementNVCounter(state.indices.passcodeCounter, authValue: state.nvAuthorization) }
            try write(&state, as: DeviceFile.fileName, in: directory, connection)
            _ = try directory.remove(DeviceFile.nextFileName, durable: true)
            try writeLockState(unlocked: true, state, connection)
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

    /// - Throws: ``KeychainError`` `.tampered` when `device.meta` fails authentication.
    package func standing(ofPasscodeKey publicKey: [UInt8], _ connection: TPMConnection? = nil) throws(KeychainError) -> PasscodeKeyStanding {
        guard let file = try state(connection)?.file else { return .unknown }
        if let current = file.passcode, current.publicKey == publicKey { return .current }
        if let retired = file.retiredPasscodeKeys.last(where: { $0.publicKey == publicKey }) { return .retired(epoch: retired.epoch) }
        return .unknown
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

    func passcodePrivateKey(_ passcode: SecretBytes, _ connection: TPMConnection) throws(KeychainError) -> Curve25519.KeyAgreement.PrivateKey {
        guard let state = try state(connection), let current = state.file.passcode else {
            throw KeychainError(.passcodeNotSet, "No device passcode is set")
        }
        return try Self.agreementKey(seed: try openPasscodeKey(current, passcode: passcode, state, connection))
    }

    /// Verifies the passcode and unlocks the device (the lock-state index reads unlocked).
    package func unlock(passcode: SecretBytes) throws(KeychainError) {
        try withConnection { (connection) throws(KeychainError) in
            _ = try passcodePrivateKey(passcode, connection)
            guard let state = try state(connection) else { throw KeychainError(.passcodeNotSet, "No device passcode is set") }
            try writeLockState(unlocked: true, state, connection)
        }
    }

    /// Locks the device: whenUnlocked items are refused by the TPM until the next unlock.
    ///
    /// - Throws: ``KeychainError`` `.passcodeNotSet`: a device without a passcode cannot be locked.
    package func lock() throws(KeychainError) {
        try withConnection { (connection) throws(KeychainError) in
            guard let state = try state(connection), state.file.passcode != nil else {
                throw KeychainError(.passcodeNotSet, "A keychain without a device passcode is always unlocked: set a passcode first")
            }
            try writeLockState(unlocked: false, state, connection)
        }
    }

    static func agreementKey(seed: SecretBytes) throws(KeychainError) -> Curve25519.KeyAgreement.PrivateKey {
        do {
            return try seed.withUnsafeBytes { try Curve25519.KeyAgreement.PrivateKey(rawRepresentation: $0) }
        } catch {
            throw KeychainError(.tampered, "The device passcode key is damaged", underlying: error)
        }
    }

    private func sealPasscodeKey(seed: SecretBytes, passcode: SecretBytes, epoch: UInt64, _ state: State,
                                 _ connection: TPMConnection) throws(KeychainError) -> DeviceFile.PasscodeKey {
        let salt = randomBytes(32)
        let policy = Policy([.authValue, try counterAssertion(state.indices.passcodeCounter, equals: epoch, connection), .unsealOnly])
        let sealed = try tpmCall {
            try connection.seal(seed, policy: policy, authValue: DeviceFile.authValue(passcode: passcode, salt: salt))
        }
        let publicKey = try Self.agreementKey(seed: seed).publicKey.rawRepresentation
        return DeviceFile.PasscodeKey(salt: salt, epoch: epoch, publicKey: Array(publicKey), sealedSeed: sealed)
    }

    private func openPasscodeKey(_ key: DeviceFile.PasscodeKey, passcode: SecretBytes, _ state: State,
                                 _ connection: TPMConnection) throws(KeychainError) -> SecretBytes {
        let policy = Policy([.authValue, try counterAssertion(state.indices.passcodeCounter, equals: key.epoch, connection), .unsealOnly])
        do {
            return try connection.unseal(key.sealedSeed, policy: policy, authValue: DeviceFile.authValue(passcode: passcode, salt: key.salt),
                                         nvAuthorizations: nvAuthorizations(state))
        } catch let error as TPMError {
            switch error.code {
            case .authorizationFailed:
                throw KeychainError(.authenticationFailed, "Wrong device passcode (the TPM counted this try toward its dictionary-attack lockout)", underlying: error)
            case .policyCheckFailed:
                throw KeychainError(.itemInvalidated, "The device passcode key in \(directoryPath) belongs to an older passcode (the passcode counter moved on): it was restored from a backup or replaced", underlying: error)
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

    // MARK: Lock state

    /// The lock-state index's bytes, or nil when it is not defined.
    func lockState(_ state: State, _ connection: TPMConnection) throws(KeychainError) -> (sinceBoot: Bool, now: Bool)? {
        let index = state.indices.lockState
        do {
            let bytes = try connection.readPublicNV(index, count: 2, authValue: state.nvAuthorization)
            return (bytes[0] == 1, bytes[1] == 1)
        } catch let error as TPMError where error.code == .handleNotFound {
            return nil
        } catch let error as TPMError where error.code == .nvIndexUninitialized {
            return (false, false)
        } catch let error as TPMError where error.code == .authorizationFailed {
            throw Self.taken(index, error)
        } catch {
            throw KeychainError(deviceTPM: error)
        }
    }

    /// Writes the lock state, defining the index (2 bytes, CLEAR_STCLEAR, NO_DA) when missing,
    /// and touches the lock stamp so that reuse windows in every process see the change.
    func writeLockState(unlocked: Bool, _ state: State, _ connection: TPMConnection) throws(KeychainError) {
        let index = state.indices.lockState
        do {
            if try connection.nvIndexAttributes(index) == nil {
                try connection.defineNVIndex(index, kind: .ordinary(size: 2), authValue: state.nvAuthorization, options: Self.lockStateOptions)
            }
            try connection.writeNV(index, data: SecretBytes(copying: [1, unlocked ? 1 : 0]), authValue: state.nvAuthorization)
        } catch let error as TPMError where error.code == .authorizationFailed {
            throw Self.taken(index, error)
        } catch {
            throw KeychainError(deviceTPM: error)
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
    package func lockSatisfies(_ requirement: LockRequirement) throws(KeychainError) -> Bool {
        guard requirement != .none else { return true }
        return try withConnection { (connection) throws(KeychainError) in
            // Without a passcode the device is always unlocked (a read writes the state when needed).
            guard let state = try state(connection), state.file.passcode != nil else { return true }
            guard let lock = try lockState(state, connection) else { return false }
            return requirement == .unlocked ? lock.sinceBoot && lock.now : lock.sinceBoot
        }
    }

    /// A PolicyNV assertion on the lock state: byte 0 (`sinceBoot`) or 1 equal to 1. A missing
    /// index is defined again locked when a passcode is set (someone undefined it: nothing proves
    /// the person unlocked), unlocked otherwise.
    func lockAssertion(_ requirement: LockRequirement, _ state: State, _ connection: TPMConnection) throws(KeychainError) -> PolicyAssertion? {
        guard requirement != .none else { return nil }
        if try lockState(state, connection) == nil {
            try writeLockState(unlocked: state.file.passcode == nil, state, connection)
        }
        let name = try tpmCall { try connection.nvIndexName(state.indices.lockState) }
        return .nv(index: state.indices.lockState, indexName: name, operand: [1], offset: requirement == .unlocked ? 1 : 0, comparison: .equal)
    }

    func tpmCall<R>(_ body: () throws -> R) throws(KeychainError) -> R {
        do {
            return try body()
        } catch let error as KeychainError {
            throw error
        } catch {
            throw KeychainError(deviceTPM: error)
        }
    }
}

extension KeychainError {
    /// A TPM failure during a device operation.
    package init(deviceTPM error: any Error) {
        guard let error = error as? TPMError else {
            self.init(.tpmUnavailable, "The TPM failed", underlying: error)
            return
        }
        switch error.code {
        case .tpmUnavailable: self.init(.tpmUnavailable, "The TPM cannot be reached", underlying: error)
        case .busy, .timedOut: self.init(.timedOut, "The TPM did not answer in time", underlying: error)
        case .lockout: self.init(.lockout, "The TPM is in dictionary-attack lockout: it recovers with time, or at once when reset with its lockout authorization", underlying: error)
        case .authorizationFailed: self.init(.authenticationFailed, "The TPM refused the authorization", underlying: error)
        case .ownerAuthorizationFailed: self.init(.authenticationFailed, error.message, underlying: error)
        case .outOfResources: self.init(.notAvailable, "The TPM has no room for another NV index or object; free one (tpm2_nvundefine) or clear the TPM", underlying: error)
        default: self.init(.tpmUnavailable, "The TPM failed: \(error.message)", underlying: error)
        }
    }
}

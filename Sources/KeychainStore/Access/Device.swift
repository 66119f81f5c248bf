import Crypto
import FoundationEssentials
package import KeychainVocabulary
import SystemCalls
package import TPM

#if canImport(Glibc)
import Glibc
#endif

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
    /// `lock.stamp`'s path, made once: a reuse window stats it on every read.
    let lockStampPath: String
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
        lockStampPath = directory + "/" + Self.lockStampName
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
                next.file.passcode?.epoch == (try? counter(next.indices.passcodeCounter, next, connection))
            {
                try adopt(&next, directory, connection)
                return next
            }
            return nil
        }
        let next = try read(DeviceFile.nextFileName, in: directory, connection)
        if var next, next.file.nvBase == current.file.nvBase {
            // A change wrote its next state, then may or may not have moved the counter: the
            // counter decides which file is the device's state.
            let value = try counter(current.indices.passcodeCounter, current, connection)
            if value != current.file.passcode?.epoch,
                next.file.passcode?.epoch == value || (next.file.passcode == nil && value != nil)
            {
                try adopt(&next, directory, connection)
                return next
            }
        }
        if next != nil { _ = try directory.remove(DeviceFile.nextFileName, durable: true) }
        return current
    }

    private func adopt(_ next: inout State, _ directory: Directory, _ connection: TPMConnection) throws(KeychainError) {
        try write(&next, as: DeviceFile.fileName, in: directory, connection)
        _ = try directory.remove(DeviceFile.nextFileName, durable: true)
    }

    /// The state in `name`, authenticated with the device secret (unsealed once per process).
    private func read(
        _ name: String, in directory: Directory, _ connection: TPMConnection
    ) throws(KeychainError) -> State? {
        guard let file = try directory.openFile(name) else { return nil }
        guard file.size <= 16384 else { throw KeychainError(.tampered, "\(file.path) is too large to be device state") }
        let parsed = try DeviceFile.parse(try file.read(count: file.size, at: 0), path: file.path)
        guard let sealed = parsed.file.sealedSecret else {
            // Version 1: nothing to authenticate with; its handles are the user's.
            guard parsed.file.nvBase == legacyIndices.base else {
                throw KeychainError(
                    .tampered,
                    "\(file.path) names NV handles 0x\(String(parsed.file.nvBase, radix: 16)), not this user's 0x\(String(legacyIndices.base, radix: 16))"
                )
            }
            return State(file: parsed.file, secret: nil)
        }
        let secret = try unsealSecret(sealed, connection, path: file.path)
        try parsed.authenticate(secret: secret, path: file.path)
        Self.declareIndices(DeviceIndices(base: parsed.file.nvBase), connection)
        return State(file: parsed.file, secret: secret)
    }

    private func unsealSecret(
        _ sealed: SealedObject, _ connection: TPMConnection, path: String
    ) throws(KeychainError) -> SecretBytes {
        let bytes = sealed.serialized()
        if let cached = Self.secrets.withLock({ $0[directoryPath] }), cached.sealed == bytes { return cached.secret }
        let secret: SecretBytes
        do {
            secret = try connection.unseal(sealed)
        } catch let error as TPMError
            where error.code == .malformedData || error.code == .wrongStorageKey || error.code == .policyCheckFailed
        {
            throw KeychainError(
                .tampered,
                "\(path) holds a device secret this TPM does not unseal: it belongs to another TPM, or was damaged",
                underlying: error)
        } catch {
            throw KeychainError(deviceTPM: error)
        }
        Self.secrets.withLock { $0[directoryPath] = (bytes, secret) }
        return secret
    }

    /// Writes `state`. A version-1 state gets its secret at its first write (its indices stay as
    /// they are), made on the connection the caller holds: a second one would wait for the first
    /// on a TPM without resource manager.
    func write(
        _ state: inout State, as name: String, in directory: Directory, _ connection: TPMConnection
    ) throws(KeychainError) {
        if state.secret == nil {
            let made = try tpmCall { try connection.generateSealedKey() }
            state.file.sealedSecret = made.sealed
            state = State(file: state.file, secret: made.key)
            Self.secrets.withLock { $0[directoryPath] = (made.sealed.serialized(), made.key) }
        }
        guard let secret = state.secret else { return }
        try directory.replace(name, with: state.file.serialized(secret: secret), durable: true)
    }

    func directory() throws(KeychainError) -> Directory {
        try Directory.createPath(directoryPath)
        guard let directory = try Directory.open(directoryPath, in: nil, create: true) else {
            throw KeychainError(.storageFailed, "Cannot create \(directoryPath)")
        }
        return directory
    }

    /// Runs `body` holding the device's lock, with a TPM connection and the device's state,
    /// making the device first when there is none.
    func withDevice<R>(
        _ body: (inout State, Directory, TPMConnection) throws(KeychainError) -> R
    ) throws(KeychainError) -> R {
        let directory = try directory()
        let lock = try directory.lock("device.lock", timeout: tpm.timeout)
        defer { withExtendedLifetime(lock) {} }
        return try withConnection { (connection) throws(KeychainError) in
            var state = try existingOrNew(directory, connection)
            return try body(&state, directory, connection)
        }
    }

    func existingOrNew(_ directory: Directory, _ connection: TPMConnection) throws(KeychainError) -> State {
        if let state = try state(connection) { return state }
        return try makeDevice(directory, connection)
    }

    /// Runs `body` with one TPM connection. The storage key's context is cached in the device
    /// directory, so a connection loads the key rather than deriving it (seconds on some TPMs).
    package func withConnection<R>(_ body: (TPMConnection) throws(KeychainError) -> R) throws(KeychainError) -> R {
        let connection: TPMConnection
        do {
            let cache = (try? Directory.open(directoryPath, in: nil, create: false)).flatMap { $0 }.map(
                StorageKeyContextFile.init(directory:))
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
            var state = State(
                file: DeviceFile(nvBase: indices.base, legacyIndices: false, sealedSecret: sealed), secret: secret)
            try write(&state, as: DeviceFile.fileName, in: directory, connection)
            Self.secrets.withLock { $0[directoryPath] = (sealed.serialized(), secret) }
            return state
        }
        throw KeychainError(
            .notAvailable,
            "No free NV handles for the device's indices in 0x01800000-0x01BFFFFF after \(Self.handleAttempts) tries: free some (tpm2_getcap handles-nv-index)"
        )
    }

    /// Defines the three indices; false (and nothing left defined) when a handle is taken.
    private func defineIndices(
        _ indices: DeviceIndices, _ authorization: SecretBytes, _ connection: TPMConnection
    ) throws(KeychainError) -> Bool {
        var defined: [UInt32] = []
        do {
            for counter in [indices.enrollmentCounter, indices.passcodeCounter] {
                try connection.defineNVIndex(
                    counter, kind: .counter, authValue: authorization, options: .noDictionaryAttack)
                defined.append(counter)
                try connection.incrementNVCounter(counter, authValue: authorization)
            }
            try connection.defineNVIndex(
                indices.lockState, kind: .ordinary(size: 2), authValue: authorization, options: Self.lockStateOptions)
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

    /// Tells the TPM layer what the device defined at its three handles, so commands authorized
    /// for them name them without reading them first (the TPM checks the names in their HMACs).
    static func declareIndices(_ indices: DeviceIndices, _ connection: TPMConnection) {
        connection.expectNVIndex(indices.enrollmentCounter, kind: .counter, options: .noDictionaryAttack)
        connection.expectNVIndex(indices.passcodeCounter, kind: .counter, options: .noDictionaryAttack)
        connection.expectNVIndex(indices.lockState, kind: .ordinary(size: 2), options: lockStateOptions)
    }
}

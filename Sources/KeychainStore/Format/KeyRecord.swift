import Crypto
import KeychainVocabulary
import TPM
import WireFormat

/// A key record, `records/<record ID as 32 hex digits>.key` (docs/FORMAT.md, "Key records"): the
/// key of every item with one protection (accessibility class and access-control flags), held by
/// one or two protectors that the TPM gates. The store's master key is record zero; every other
/// record is one of these files. All integers big-endian.
///
///     offset size  field
///     0      4     magic "TKKR"
///     4      2     version = 1
///     6      2     reserved = 0
///     8      16    store ID
///     24     16    record ID (random, never all zero)
///     40     1     accessibility class (``Accessibility``)
///     41     1     flags: bit 0 lock-bound (the sealed protector's policy checks the device's
///                  lock state); other bits 0
///     42     2     reserved = 0
///     44     4     access-control flags, Apple's raw values (``AccessControl.Flags``)
///     48     4     the device's NV base handle (``DeviceIndices``); 0 when no policy names one
///     52     8     enrollment epoch: the enrollment counter's value when bound (biometryCurrentSet), else 0
///     60     32    passcode public key the passcode protector is wrapped to (zero without one)
///     92     32    record public key (X25519): writers derive item keys from it without unlocking
///     124    2     sealed protector length L1 (0 for none; at most 4096)
///     126    L1    sealed protector: a 32-byte secret sealed (``SealedObject``, noDA) under
///                  [PolicyNV(enrollment counter = epoch)] [PolicyNV(lock state byte = 1)]
///                  PolicyCommandCode(Unseal)
///     ...    2     passcode protector length L2 (0 or 92)
///     ...    L2    passcode protector: ephemeral X25519 public key (32) || nonce (12) ||
///                  AES-256-GCM(K, nonce, 32-byte secret, AAD = record ID) (48), with
///                  K = HKDF-SHA256(X25519(ephemeral, passcode key), ephemeral || passcode key,
///                  "TPMKeychain passcode protector" || store ID || record ID)
///     ...    32    HMAC-SHA256(metadata key, "TPMKeychain key record" || every byte before, as read)
///
/// The record's secret S is the sealed secret, the passcode-wrapped secret (either opens it: the
/// same S is in both), or, with `.and`, HKDF of both. The record's private key is
/// X25519(HKDF-SHA256(S, record ID, "TPMKeychain record key")).
///
/// The MAC, under a key only the master key yields, means a record cannot be moved from another
/// store, nor its fields edited to drop a constraint: the policy is rebuilt from these fields, and
/// the TPM refuses a sealed object whose policy differs.
struct KeyRecord: Sendable, Equatable {
    static let magic = Array("TKKR".utf8)
    static let version: UInt16 = 1
    static let macDomain = Array("TPMKeychain key record".utf8)
    static let maximumSealedSize = 4096
    static let passcodeProtectorSize = 92
    static let directoryName = "records"

    struct Flags: OptionSet, Sendable, Equatable {
        let rawValue: UInt8
        static let lockBound = Flags(rawValue: 1 << 0)
    }

    let storeID: [UInt8]
    let recordID: [UInt8]
    let accessibility: Accessibility
    let flags: Flags
    let accessFlags: AccessControl.Flags
    let nvBase: UInt32
    let enrollmentEpoch: UInt64
    let passcodeKey: [UInt8]
    let publicKey: [UInt8]
    let sealedProtector: SealedObject?
    let passcodeProtector: [UInt8]?

    /// The file name for a record ID.
    static func fileName(_ recordID: [UInt8]) -> String {
        recordID.hexString + ".key"
    }

    /// The protection the record serves, validated again (a file is not trusted to hold a valid combination).
    func protection() throws(KeychainError) -> Protection {
        Protection(try AccessControl(accessibility, flags: accessFlags))
    }

    /// The sealed protector's policy: rebuilt from the authenticated fields, never read from the
    /// sealed object. `nvName` gives an NV index's name (which the TPM supplies).
    ///
    /// Records sealed before 2026-11-27 end every policy with PolicyCommandCode(Unseal); later
    /// ones (`commandCode` false) only a policy with no other assertion. The assertion adds
    /// nothing beside others: adminWithPolicy makes every ADMIN-role use need a PolicyCommandCode
    /// of its own, so a policy without one authorizes only the USER role, which for sealed data is
    /// TPM2_Unseal (and TPM2_PolicySecret, which proves no more than unsealing would). Leaving it
    /// out saves a command on every first protected get; an opener tries both.
    func sealedPolicy(
        nvName: (UInt32) throws(KeychainError) -> [UInt8], commandCode: Bool = false
    ) throws(KeychainError) -> Policy {
        var assertions = try deviceAssertions(nvName: nvName)
        if commandCode || assertions.isEmpty { assertions.append(.unsealOnly) }
        return Policy(assertions)
    }

    /// The policy of a TPM key kept in an item under this record (a key item's ``TPMKeyValue``):
    /// the record's device assertions (the enrollment counter for biometryCurrentSet, the lock
    /// state for a lock-bound class), then PolicyAuthValue with the key's own authorization value,
    /// which only the item's secret holds. The TPM itself then refuses the key once the enrollment
    /// changes or the device locks, whoever holds its blob and authorization value.
    func tpmKeyPolicy(nvName: (UInt32) throws(KeychainError) -> [UInt8]) throws(KeychainError) -> Policy {
        Policy(try deviceAssertions(nvName: nvName) + [.authValue])
    }

    /// The assertions on the device's NV indices that the record's protection implies.
    private func deviceAssertions(
        nvName: (UInt32) throws(KeychainError) -> [UInt8]
    ) throws(KeychainError) -> [PolicyAssertion] {
        var assertions: [PolicyAssertion] = []
        let protection = try protection()
        let indices = DeviceIndices(base: nvBase)
        if protection.biometry == .currentSet {
            var operand = WireWriter()
            operand.append(enrollmentEpoch)
            assertions.append(
                .nv(
                    index: indices.enrollmentCounter, indexName: try nvName(indices.enrollmentCounter),
                    operand: operand.bytes, offset: 0, comparison: .equal))
        }
        if flags.contains(.lockBound) {
            let offset: UInt16 = accessibility.lockRequirement == .unlocked ? 1 : 0
            assertions.append(
                .nv(
                    index: indices.lockState, indexName: try nvName(indices.lockState), operand: [1], offset: offset,
                    comparison: .equal))
        }
        return assertions
    }

    func serialized(metadataKey: SymmetricKey) -> [UInt8] {
        var writer = WireWriter()
        writer.append(raw: Self.magic)
        writer.append(Self.version)
        writer.append(UInt16(0))
        writer.append(raw: storeID)
        writer.append(raw: recordID)
        writer.append(accessibility.rawValue)
        writer.append(flags.rawValue)
        writer.append(UInt16(0))
        writer.append(UInt32(accessFlags.rawValue)) // validated flags fit Apple's 32 bits
        writer.append(nvBase)
        writer.append(enrollmentEpoch)
        writer.append(raw: passcodeKey)
        writer.append(raw: publicKey)
        let sealed = sealedProtector?.serialized() ?? []
        writer.append(UInt16(sealed.count))
        writer.append(raw: sealed)
        writer.append(UInt16(passcodeProtector?.count ?? 0))
        writer.append(raw: passcodeProtector ?? [])
        let body = writer.bytes
        return body + Array(HMAC<SHA256>.authenticationCode(for: Self.macDomain + body, using: metadataKey))
    }

    /// Parses and authenticates a record file.
    ///
    /// - Throws: ``KeychainError`` `.tampered` for anything no writer produces, a record of
    ///   another store, or a MAC that does not match the bytes as read.
    init(
        parsing bytes: [UInt8], storeID expectedStoreID: [UInt8], metadataKey: SymmetricKey, path: String
    ) throws(KeychainError) {
        do {
            var reader = WireReader(bytes)
            guard try reader.readBytes(4) == Self.magic, try reader.readUInt16() == Self.version,
                try reader.readUInt16() == 0
            else {
                throw KeychainError(.tampered, "\(path) is not a version-1 key record")
            }
            storeID = try reader.readBytes(16)
            recordID = try reader.readBytes(16)
            let accessibility = Accessibility(rawValue: try reader.readUInt8())
            flags = Flags(rawValue: try reader.readUInt8())
            let reserved = try reader.readUInt16()
            accessFlags = AccessControl.Flags(rawValue: UInt(try reader.readUInt32()))
            nvBase = try reader.readUInt32()
            enrollmentEpoch = try reader.readUInt64()
            passcodeKey = try reader.readBytes(32)
            publicKey = try reader.readBytes(32)
            let sealedLength = Int(try reader.readUInt16())
            guard let accessibility, reserved == 0, flags.rawValue & ~1 == 0, sealedLength <= Self.maximumSealedSize,
                recordID != ItemFileV2.masterKeyRecord
            else {
                throw KeychainError(.tampered, "\(path) is a damaged key record")
            }
            self.accessibility = accessibility
            let sealed = try reader.readBytes(sealedLength)
            let passcodeLength = Int(try reader.readUInt16())
            guard passcodeLength == 0 || passcodeLength == Self.passcodeProtectorSize else {
                throw KeychainError(.tampered, "\(path) is a damaged key record")
            }
            let wrapped = try reader.readBytes(passcodeLength)
            let authenticatedCount = bytes.count - reader.remaining
            let mac = try reader.readBytes(32)
            guard reader.remaining == 0 else { throw KeychainError(.tampered, "\(path) has trailing bytes") }
            guard
                HMAC<SHA256>.isValidAuthenticationCode(
                    mac, authenticating: Self.macDomain + bytes[..<authenticatedCount],
                    using: metadataKey)
            else {
                throw KeychainError(
                    .tampered, "\(path) failed authentication: the key record was modified or belongs to another store")
            }
            guard storeID == expectedStoreID else {
                throw KeychainError(.tampered, "\(path) belongs to another keychain store")
            }
            sealedProtector = sealedLength > 0 ? try SealedObject(serialized: sealed) : nil
            passcodeProtector = passcodeLength > 0 ? wrapped : nil
            // The protectors present must be the ones the protection calls for.
            let protection = Protection(try AccessControl(accessibility, flags: accessFlags))
            guard (sealedProtector != nil) == protection.hasSealedProtector,
                (passcodeProtector != nil) == protection.hasPasscodeProtector,
                protection.biometry == .currentSet || enrollmentEpoch == 0
            else {
                throw KeychainError(.tampered, "\(path) does not hold the protectors its protection needs")
            }
        } catch let error as KeychainError {
            throw error.code == .tampered
                ? error : KeychainError(.tampered, "\(path) is a damaged key record: \(error.message)")
        } catch {
            throw KeychainError(.tampered, "\(path) is a damaged key record", underlying: error)
        }
    }

    init(
        storeID: [UInt8], recordID: [UInt8], accessibility: Accessibility, flags: Flags,
        accessFlags: AccessControl.Flags,
        nvBase: UInt32, enrollmentEpoch: UInt64, passcodeKey: [UInt8], publicKey: [UInt8],
        sealedProtector: SealedObject?,
        passcodeProtector: [UInt8]?
    ) {
        self.storeID = storeID
        self.recordID = recordID
        self.accessibility = accessibility
        self.flags = flags
        self.accessFlags = accessFlags
        self.nvBase = nvBase
        self.enrollmentEpoch = enrollmentEpoch
        self.passcodeKey = passcodeKey
        self.publicKey = publicKey
        self.sealedProtector = sealedProtector
        self.passcodeProtector = passcodeProtector
    }
}

import Crypto
import FoundationEssentials
import KeychainVocabulary
import TPM
import WireFormat

/// `device.meta`, the device's state beside its TPM counters (docs/FORMAT.md, "Device state").
/// All integers big-endian.
///
///     offset size  field
///     0      4     magic "TKDV"
///     4      2     version = 2
///     6      2     reserved = 0
///     8      4     NV base handle B: the enrollment counter is B, the passcode counter B+1,
///                  the lock-state index B+2
///     12     1     flags: bit 0 enrollment recorded, bit 1 passcode set, bit 2 version-1 indices
///                  (handles derived from the user ID, empty authorization); other bits 0
///     13     3     reserved = 0
///     16     32    SHA-256 of the enrollment identifier last seen (zero when nothing is enrolled)
///     48     32    passcode salt (zero without a passcode)
///     80     8     passcode epoch: the passcode counter's value the sealed passcode key requires
///     88     32    passcode public key (X25519; zero without a passcode)
///     120    2     sealed passcode key length L (0 without a passcode; at most 4096)
///     122    L     the passcode key's 32-byte seed, sealed (``SealedObject``) under
///                  PolicyAuthValue, PolicyNV(passcode counter = epoch), PolicyCommandCode(Unseal),
///                  with authValue = HKDF-SHA256(passcode, salt, "TPMKeychain passcode"), DA-protected
///     ...    2     retired passcode keys R (at most ``maximumRetiredKeys``)
///     ...    R×40  each: a passcode public key this device removed (32), and the passcode epoch it
///                  was sealed at (8), oldest first
///     ...    2     sealed device secret length D (1 to 4096)
///     ...    D     the device secret: 32 random bytes sealed (``SealedObject``, noDA, empty
///                  authorization) to this TPM's storage key
///     ...    32    HMAC-SHA256(HKDF-SHA256(device secret, info "TPMKeychain device.meta"),
///                  "TPMKeychain device state" ‖ every byte before, as read)
///
/// The device secret is what makes this state the device's own: only this TPM unseals it; the
/// MAC under it means the file cannot be edited (a passcode key swapped, the enrollment hash
/// or the salt changed, the retired keys rewritten) without this TPM; and the NV indices'
/// authorization value, HKDF-SHA256(device secret, info "TPMKeychain device NV"), means no other
/// TPM user can move, write or stand in for them. Their handles are chosen at random when the
/// device is made, in the TCG registry's unassigned range, and kept here.
///
/// Version 1 (no retired keys, no device secret, no MAC; handles from the user ID, empty
/// authorization) is read, and written back as version 2 with bit 2 set: its indices keep
/// working as they are, and stay open to other TPM users until the device is made anew.
///
/// The retired keys are what tells a key record made for a passcode this device has since
/// removed (gone for good, once the TPM's passcode counter is past that epoch) from one made on
/// another device (another member's, another state directory's), which must be left alone.
struct DeviceFile: Sendable, Equatable {
    static let fileName = "device.meta"
    static let nextFileName = "device.meta.next"
    static let magic = Array("TKDV".utf8)
    static let version: UInt16 = 2
    /// The oldest retired keys are forgotten beyond this: records made for them then read as
    /// another device's (never deleted by mistake).
    static let maximumRetiredKeys = 64
    static let maximumSealedSize = 4096
    static let passcodeInfo = Array("TPMKeychain passcode".utf8)
    static let macDomain = Array("TPMKeychain device state".utf8)
    static let macInfo = Array("TPMKeychain device.meta".utf8)
    static let nvInfo = Array("TPMKeychain device NV".utf8)

    var nvBase: UInt32
    /// The indices are version 1's: handles from the user ID, empty authorization.
    var legacyIndices: Bool
    var enrollmentRecorded = false
    var enrollmentHash = [UInt8](repeating: 0, count: 32)
    var passcode: PasscodeKey?
    var retiredPasscodeKeys: [RetiredPasscodeKey] = []
    /// The device secret, sealed; nil only in a version-1 file (which nothing authenticates).
    var sealedSecret: SealedObject?

    /// The sealed passcode key and what opening it needs.
    struct PasscodeKey: Sendable, Equatable {
        var salt: [UInt8]
        var epoch: UInt64
        var publicKey: [UInt8]
        var sealedSeed: SealedObject
    }

    /// A passcode key this device removed.
    struct RetiredPasscodeKey: Sendable, Equatable {
        var publicKey: [UInt8]
        /// The passcode counter's value the key was sealed at: once the counter is past it, the TPM
        /// never opens that key again.
        var epoch: UInt64
    }

    init(nvBase: UInt32, legacyIndices: Bool, sealedSecret: SealedObject?) {
        self.nvBase = nvBase
        self.legacyIndices = legacyIndices
        self.sealedSecret = sealedSecret
    }

    /// Records that `key` is removed (keeping at most ``maximumRetiredKeys``).
    mutating func retire(_ key: PasscodeKey) {
        retiredPasscodeKeys.append(RetiredPasscodeKey(publicKey: key.publicKey, epoch: key.epoch))
        if retiredPasscodeKeys.count > Self.maximumRetiredKeys {
            retiredPasscodeKeys.removeFirst(retiredPasscodeKeys.count - Self.maximumRetiredKeys)
        }
    }

    /// The authorization value of the sealed passcode key: the passcode itself never reaches the TPM.
    static func authValue(passcode: SecretBytes, salt: [UInt8]) -> SecretBytes {
        let key = passcode.withUnsafeBytes { bytes in
            OneBlockHKDF.deriveKey(inputKeyMaterial: bytes, salt: salt[...], info: passcodeInfo[...])
        }
        return key.withUnsafeBytes { SecretBytes(copying: $0) }
    }

    /// The key of the file's MAC.
    static func macKey(secret: SecretBytes) -> SymmetricKey {
        secret.withUnsafeBytes { OneBlockHKDF.deriveKey(inputKeyMaterial: $0, info: macInfo[...]) }
    }

    /// The authorization value of the device's NV indices.
    static func nvAuthorization(secret: SecretBytes) -> SecretBytes {
        let key = secret.withUnsafeBytes { OneBlockHKDF.deriveKey(inputKeyMaterial: $0, info: nvInfo[...]) }
        return key.withUnsafeBytes { SecretBytes(copying: $0) }
    }

    /// The file's bytes, version 2, authenticated with the device secret.
    ///
    /// - Precondition: ``sealedSecret`` is set (only a version-1 file, read, lacks it).
    func serialized(secret: SecretBytes) -> [UInt8] {
        var writer = WireWriter()
        writer.append(raw: Self.magic)
        writer.append(Self.version)
        writer.append(UInt16(0))
        writer.append(nvBase)
        writer.append(UInt8((enrollmentRecorded ? 1 : 0) | (passcode != nil ? 2 : 0) | (legacyIndices ? 4 : 0)))
        writer.append(raw: [0, 0, 0])
        writer.append(raw: enrollmentHash)
        let zero = [UInt8](repeating: 0, count: 32)
        writer.append(raw: passcode?.salt ?? zero)
        writer.append(passcode?.epoch ?? 0)
        writer.append(raw: passcode?.publicKey ?? zero)
        let sealed = passcode?.sealedSeed.serialized() ?? []
        writer.append(UInt16(sealed.count))
        writer.append(raw: sealed)
        writer.append(UInt16(retiredPasscodeKeys.count))
        for retired in retiredPasscodeKeys {
            writer.append(raw: retired.publicKey)
            writer.append(retired.epoch)
        }
        let sealedSecret = self.sealedSecret?.serialized() ?? []
        writer.append(UInt16(sealedSecret.count))
        writer.append(raw: sealedSecret)
        let body = writer.bytes
        return body
            + Array(HMAC<SHA256>.authenticationCode(for: Self.macDomain + body, using: Self.macKey(secret: secret)))
    }

    /// What parsing found: the state, and for version 2 the bytes its MAC covers and the MAC,
    /// which ``authenticate(secret:path:)`` checks once the device secret is unsealed.
    struct Parsed: Sendable {
        var file: DeviceFile
        var version: UInt16
        fileprivate var authenticated: [UInt8] = []
        fileprivate var mac: [UInt8] = []

        /// - Throws: ``KeychainError`` `.tampered` when the MAC fails.
        func authenticate(secret: SecretBytes, path: String) throws(KeychainError) {
            guard version >= 2 else { return }
            guard
                HMAC<SHA256>.isValidAuthenticationCode(
                    mac, authenticating: DeviceFile.macDomain + authenticated,
                    using: DeviceFile.macKey(secret: secret))
            else {
                throw KeychainError(
                    .tampered,
                    "\(path) fails authentication: it was edited, or it is another device's state (its MAC is under a secret only this device's TPM unseals)"
                )
            }
        }
    }

    /// - Throws: ``KeychainError`` `.tampered` for anything no writer produces.
    static func parse(_ bytes: [UInt8], path: String) throws(KeychainError) -> Parsed {
        return try KeychainError.parsing(
            { () throws in
                var reader = WireReader(bytes)
                let magic = try reader.readBytes(4)
                let version = try reader.readUInt16()
                guard magic == Self.magic, version == 1 || version == Self.version, try reader.readUInt16() == 0 else {
                    throw KeychainError(.tampered, "\(path) is not version-1 or version-2 device state")
                }
                let nvBase = try reader.readUInt32()
                let flags = try reader.readUInt8()
                let reserved = try reader.readBytes(3)
                let enrollmentHash = try reader.readBytes(32)
                let salt = try reader.readBytes(32)
                let epoch = try reader.readUInt64()
                let publicKey = try reader.readBytes(32)
                let sealedLength = Int(try reader.readUInt16())
                let knownFlags: UInt8 = version == 1 ? 3 : 7
                guard flags & ~knownFlags == 0, reserved == [0, 0, 0], sealedLength <= maximumSealedSize,
                    (flags & 2 != 0) == (sealedLength > 0)
                else {
                    throw KeychainError(.tampered, "\(path) is damaged device state")
                }
                let sealed = try reader.readBytes(sealedLength)
                var file = DeviceFile(nvBase: nvBase, legacyIndices: version == 1 || flags & 4 != 0, sealedSecret: nil)
                file.enrollmentRecorded = flags & 1 != 0
                file.enrollmentHash = enrollmentHash
                if sealedLength > 0 {
                    file.passcode = PasscodeKey(
                        salt: salt, epoch: epoch, publicKey: publicKey, sealedSeed: try SealedObject(serialized: sealed)
                    )
                }
                var parsed = Parsed(file: file, version: version)
                if version >= 2 {
                    let count = Int(try reader.readUInt16())
                    guard count <= maximumRetiredKeys else {
                        throw KeychainError(.tampered, "\(path) lists too many retired passcode keys")
                    }
                    for _ in 0..<count {
                        parsed.file.retiredPasscodeKeys.append(
                            RetiredPasscodeKey(publicKey: try reader.readBytes(32), epoch: try reader.readUInt64()))
                    }
                    let secretLength = Int(try reader.readUInt16())
                    guard secretLength > 0, secretLength <= maximumSealedSize else {
                        throw KeychainError(.tampered, "\(path) is damaged device state")
                    }
                    parsed.file.sealedSecret = try SealedObject(serialized: try reader.readBytes(secretLength))
                    parsed.authenticated = Array(bytes[0..<(bytes.count - reader.remaining)])
                    parsed.mac = try reader.readBytes(32)
                }
                guard reader.remaining == 0 else { throw KeychainError(.tampered, "\(path) has trailing bytes") }
                return parsed
            }, damaged: { (error) in KeychainError(.tampered, "\(path) is damaged device state", underlying: error) })
    }
}

/// The device's TPM NV indices: three consecutive handles from a base.
package struct DeviceIndices: Sendable, Hashable {
    /// Version 1's handles: 4 per user ID, for user IDs modulo 4096, from 0x01544B00. That range
    /// belongs to TPM manufacturers in the TCG registry, and users whose IDs are equal modulo 4096
    /// shared them; kept only to read version-1 devices.
    package static let legacyFirstHandle: UInt32 = 0x0154_4B00
    package static let legacySlots: UInt32 = 4096

    /// Where new devices' handles are chosen: the lower half of the range the TCG handle registry
    /// leaves unassigned (0x01800000 to 0x01BFFFFF), less systemd's registered 0x01800400 to
    /// 0x018005FF. The upper half holds stores' rollback counters (`ItemStore.counterRange`).
    /// Devices made when the whole range was used keep the base their device.meta records.
    package static let range: ClosedRange<UInt32> = 0x0180_0000...0x019F_FFFC
    static let systemdRange: ClosedRange<UInt32> = 0x0180_0400...0x0180_05FF

    package let base: UInt32
    /// The enrollment counter (TPM_NT_COUNTER, NO_DA): incremented on every change of the enrolled set.
    package var enrollmentCounter: UInt32 { base }
    /// The passcode counter (TPM_NT_COUNTER, NO_DA): incremented on every passcode change or removal.
    package var passcodeCounter: UInt32 { base + 1 }
    /// The lock state (2 bytes, CLEAR_STCLEAR, NO_DA): byte 0 is 1 once unlocked since the TPM's
    /// last reset, byte 1 is 1 while unlocked.
    package var lockState: UInt32 { base + 2 }
    package var all: [UInt32] { [enrollmentCounter, passcodeCounter, lockState] }

    package init(base: UInt32) { self.base = base }

    /// Version 1's indices of a user.
    package init(legacyUserID userID: UInt32) {
        base = Self.legacyFirstHandle + (userID % Self.legacySlots) * 4
    }

    /// A random base in ``range``, aligned to 4, outside systemd's handles.
    static func random() -> DeviceIndices {
        while true {
            let base = UInt32.random(in: range) & ~3
            let indices = DeviceIndices(base: base)
            if !indices.all.contains(where: { systemdRange.contains($0) }) { return indices }
        }
    }
}

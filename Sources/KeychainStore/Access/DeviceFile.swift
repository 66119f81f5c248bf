import Crypto
import TPM

/// `device.meta`, the device's state beside its TPM counters (docs/FORMAT.md, "Device state").
/// All integers big-endian.
///
///     offset size  field
///     0      4     magic "TKDV"
///     4      2     version = 1
///     6      2     reserved = 0
///     8      4     NV base handle B: the enrollment counter is B, the passcode counter B+1,
///                  the lock-state index B+2
///     12     1     flags: bit 0 enrollment recorded, bit 1 passcode set; other bits 0
///     13     3     reserved = 0
///     16     32    SHA-256 of the enrollment identifier last seen (zero when nothing is enrolled)
///     48     32    passcode salt (zero without a passcode)
///     80     8     passcode epoch: the passcode counter's value the sealed passcode key requires
///     88     32    passcode public key (X25519; zero without a passcode)
///     120    2     sealed passcode key length L (0 without a passcode; at most 4096)
///     122    L     the passcode key's 32-byte seed, sealed (``SealedObject``) under
///                  PolicyAuthValue, PolicyNV(passcode counter = epoch), PolicyCommandCode(Unseal),
///                  with authValue = HKDF-SHA256(passcode, salt, "TPMKeychain passcode"), DA-protected
///     122+L  2     retired passcode keys R (version 2; at most ``maximumRetiredKeys``)
///     ...    R×40  each: a passcode public key this device replaced or removed (32), and the
///                  passcode epoch it was sealed at (8), oldest first
///
/// Version 1 is version 2 without the retired keys; it is read, and written back as version 2.
/// The retired keys are what tells a key record made for a passcode this device has since
/// changed or removed (gone for good, once the TPM's passcode counter is past that epoch) from
/// one made on another device (another member's, another state directory's), which this device
/// must leave alone.
///
/// There is no MAC: nothing here is a secret or grants access. The counters in the TPM are what
/// invalidates; a file put back from a backup holds a sealed key whose policy names an old epoch,
/// which the TPM refuses. Who can write this file can make items added later wrap their keys to
/// a passcode key of their own: that is code running as the user, outside the threat model
/// (docs/SECURITY.md).
struct DeviceFile: Sendable, Equatable {
    static let fileName = "device.meta"
    static let nextFileName = "device.meta.next"
    static let magic = Array("TKDV".utf8)
    static let version: UInt16 = 2
    /// The oldest retired keys are forgotten beyond this: records made for them then read as
    /// another device's (never deleted by mistake).
    static let maximumRetiredKeys = 64
    static let passcodeInfo = Array("TPMKeychain passcode".utf8)

    var nvBase: UInt32
    var enrollmentRecorded = false
    var enrollmentHash = [UInt8](repeating: 0, count: 32)
    var passcode: PasscodeKey?
    var retiredPasscodeKeys: [RetiredPasscodeKey] = []

    /// A passcode key this device replaced or removed.
    struct RetiredPasscodeKey: Sendable, Equatable {
        var publicKey: [UInt8]
        /// The passcode counter's value the key was sealed at: once the counter is past it, the TPM
        /// never opens that key again.
        var epoch: UInt64
    }

    /// Records that `key` is replaced or removed (keeping at most ``maximumRetiredKeys``).
    mutating func retire(_ key: PasscodeKey) {
        retiredPasscodeKeys.append(RetiredPasscodeKey(publicKey: key.publicKey, epoch: key.epoch))
        if retiredPasscodeKeys.count > Self.maximumRetiredKeys { retiredPasscodeKeys.removeFirst(retiredPasscodeKeys.count - Self.maximumRetiredKeys) }
    }

    /// The sealed passcode key and what opening it needs.
    struct PasscodeKey: Sendable, Equatable {
        var salt: [UInt8]
        var epoch: UInt64
        var publicKey: [UInt8]
        var sealedSeed: SealedObject
    }

    init(nvBase: UInt32) { self.nvBase = nvBase }

    /// The authorization value of the sealed passcode key: the passcode itself never reaches the TPM.
    static func authValue(passcode: SecretBytes, salt: [UInt8]) -> SecretBytes {
        let key = passcode.withUnsafeBytes { bytes in
            HKDF<SHA256>.deriveKey(inputKeyMaterial: SymmetricKey(data: bytes), salt: salt, info: passcodeInfo, outputByteCount: 32)
        }
        return key.withUnsafeBytes { SecretBytes(copying: $0) }
    }

    func serialized() -> [UInt8] {
        var writer = WireWriter()
        writer.append(raw: Self.magic)
        writer.append(Self.version)
        writer.append(UInt16(0))
        writer.append(nvBase)
        writer.append(UInt8((enrollmentRecorded ? 1 : 0) | (passcode != nil ? 2 : 0)))
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
        return writer.bytes
    }

    /// - Throws: ``StoreError`` `.tampered` for anything no writer produces.
    init(parsing bytes: [UInt8], path: String) throws(StoreError) {
        do {
            var reader = WireReader(bytes)
            let magic = try reader.readBytes(4)
            let version = try reader.readUInt16()
            guard magic == Self.magic, version == 1 || version == Self.version, try reader.readUInt16() == 0 else {
                throw StoreError(.tampered, "\(path) is not version-1 or version-2 device state")
            }
            nvBase = try reader.readUInt32()
            let flags = try reader.readUInt8()
            let reserved = try reader.readBytes(3)
            enrollmentHash = try reader.readBytes(32)
            let salt = try reader.readBytes(32)
            let epoch = try reader.readUInt64()
            let publicKey = try reader.readBytes(32)
            let sealedLength = Int(try reader.readUInt16())
            guard flags & ~3 == 0, reserved == [0, 0, 0], sealedLength <= 4096, (flags & 2 != 0) == (sealedLength > 0) else {
                throw StoreError(.tampered, "\(path) is damaged device state")
            }
            enrollmentRecorded = flags & 1 != 0
            let sealed = try reader.readBytes(sealedLength)
            if version >= 2 {
                let count = Int(try reader.readUInt16())
                guard count <= Self.maximumRetiredKeys else { throw StoreError(.tampered, "\(path) lists too many retired passcode keys") }
                for _ in 0..<count {
                    retiredPasscodeKeys.append(RetiredPasscodeKey(publicKey: try reader.readBytes(32), epoch: try reader.readUInt64()))
                }
            }
            guard reader.remaining == 0 else { throw StoreError(.tampered, "\(path) has trailing bytes") }
            if sealedLength > 0 {
                passcode = PasscodeKey(salt: salt, epoch: epoch, publicKey: publicKey, sealedSeed: try SealedObject(serialized: sealed))
            }
        } catch let error as StoreError {
            throw error
        } catch {
            throw StoreError(.tampered, "\(path) is damaged device state", underlying: error)
        }
    }
}

/// The device's TPM NV indices, per user: few, shared by every store of the user on this TPM.
package struct DeviceIndices: Sendable, Hashable {
    /// TPMKeychain's handles, in the TPM owner's range (TCG handle registry: 0x01000000 to
    /// 0x013FFFFF is for the owner's own use): 4 per user ID, for user IDs modulo 4096.
    package static let firstHandle: UInt32 = 0x0154_4B00
    package static let slots: UInt32 = 4096

    package let base: UInt32
    /// The enrollment counter (TPM_NT_COUNTER, NO_DA): incremented on every change of the enrolled set.
    package var enrollmentCounter: UInt32 { base }
    /// The passcode counter (TPM_NT_COUNTER, NO_DA): incremented on every passcode change or removal.
    package var passcodeCounter: UInt32 { base + 1 }
    /// The lock state (2 bytes, CLEAR_STCLEAR, NO_DA): byte 0 is 1 once unlocked since the TPM's
    /// last reset, byte 1 is 1 while unlocked.
    package var lockState: UInt32 { base + 2 }

    package init(base: UInt32) { self.base = base }

    /// The indices of a user.
    package init(userID: UInt32) {
        base = Self.firstHandle + (userID % Self.slots) * 4
    }
}

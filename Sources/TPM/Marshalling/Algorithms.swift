/// TPM 2.0 Part 2 §6.3 (TPM_ALG_ID) and §6.4 (TPM_ECC_CURVE) values this layer uses.
enum AlgorithmID {
    static let rsa: UInt16 = 0x0001
    static let aes: UInt16 = 0x0006
    static let keyedHash: UInt16 = 0x0008
    static let hmac: UInt16 = 0x0005
    static let sha256: UInt16 = 0x000B
    static let null: UInt16 = 0x0010
    static let ecc: UInt16 = 0x0023
    static let cfb: UInt16 = 0x0043
    static let eccNistP256: UInt16 = 0x0003
    static let sha384: UInt16 = 0x000C
    static let sha512: UInt16 = 0x000D
    static let ecdsa: UInt16 = 0x0018
}

/// TPM 2.0 Part 2 §8.3 TPMA_OBJECT bits.
struct ObjectAttributes: OptionSet, Sendable {
    let rawValue: UInt32
    static let fixedTPM = ObjectAttributes(rawValue: 0x0000_0002)
    static let fixedParent = ObjectAttributes(rawValue: 0x0000_0010)
    static let sensitiveDataOrigin = ObjectAttributes(rawValue: 0x0000_0020)
    static let userWithAuth = ObjectAttributes(rawValue: 0x0000_0040)
    static let adminWithPolicy = ObjectAttributes(rawValue: 0x0000_0080)
    static let noDA = ObjectAttributes(rawValue: 0x0000_0400)
    static let restricted = ObjectAttributes(rawValue: 0x0001_0000)
    static let decrypt = ObjectAttributes(rawValue: 0x0002_0000)
    static let sign = ObjectAttributes(rawValue: 0x0004_0000)
}

/// TPM 2.0 Part 2 §6.5 command codes that enter policy digests or audit records.
enum CommandCode {
    static let policyNV: UInt32 = 0x0000_0149
    static let policyAuthValue: UInt32 = 0x0000_016B
    static let policyPCR: UInt32 = 0x0000_017F
    static let policyCommandCode: UInt32 = 0x0000_016C
    static let unseal: UInt32 = 0x0000_015E
    static let sign: UInt32 = 0x0000_015D
    static let ecdhZGen: UInt32 = 0x0000_0154
}

/// TPM 2.0 Part 2 §6.13 TPM_PT properties: PT_FIXED (0x100 + n), the TPM's identity, and PT_VAR
/// (0x200 + n), its changing state. The C header spells them as compound macros.
enum TPMProperty {
    static let manufacturer: UInt32 = 0x105
    static let vendorStrings: [UInt32] = [0x106, 0x107, 0x108, 0x109]
    static let firmwareVersion1: UInt32 = 0x10B
    static let firmwareVersion2: UInt32 = 0x10C

    /// TPM_PT_PERMANENT (TPMA_PERMANENT bits; inLockout is bit 9).
    static let permanent: UInt32 = 0x200
    static let inLockoutBit: UInt32 = 1 << 9
    /// TPMA_PERMANENT.ownerAuthSet.
    static let ownerAuthSetBit: UInt32 = 1 << 0
    /// TPMA_PERMANENT.lockoutAuthSet.
    static let lockoutAuthSetBit: UInt32 = 1 << 2
    /// TPM_PT_HR_LOADED: sessions loaded now; TPM_PT_HR_ACTIVE: sessions active (saved or loaded).
    static let loadedSessions: UInt32 = 0x203
    static let activeSessions: UInt32 = 0x205
    /// TPM_PT_HR_TRANSIENT_AVAIL: how many more transient objects could be loaded now.
    static let transientAvailable: UInt32 = 0x207
    /// The most transient objects one connection holds at once (storage key, a sealed object, a
    /// second one while a record is opened): room for these means no stale handle is in the way.
    static let transientObjectsNeeded: UInt32 = 3
    static let nvCounters: UInt32 = 0x20A
    /// TPM_PT_NV_COUNTERS_AVAIL: how many more NV counters could be defined (an estimate).
    static let nvCountersAvailable: UInt32 = 0x20B
    static let lockoutCounter: UInt32 = 0x20E
    static let maxAuthFail: UInt32 = 0x20F
    static let lockoutInterval: UInt32 = 0x210
    static let lockoutRecovery: UInt32 = 0x211
}

/// TPM 2.0 Part 2 §7 handle ranges and capability limits. tss2_tpm2_types.h writes these as
/// compound macros (TPM2_HR_TRANSIENT + 0, buffer arithmetic), which do not import into Swift.
enum HandleRange {
    static let loadedSessionFirst: UInt32 = 0x0200_0000
    static let activeSessionFirst: UInt32 = 0x0300_0000
    static let transientFirst: UInt32 = 0x8000_0000
    /// (MAX_CAP_BUFFER 1024 - capability 4 - count 4) / 4.
    static let maximumCapabilityHandles: UInt32 = 254
    /// (MAX_CAP_BUFFER 1024 - capability 4 - count 4) / 8.
    static let maximumCapabilityProperties: UInt32 = 127
}

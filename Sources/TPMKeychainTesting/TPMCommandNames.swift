extension RecordingTPMProxy {
    /// A TPM 2.0 command code's name as TPM 2.0 Part 2 (table "TPM_CC") spells it without the
    /// `TPM2_` prefix ("Unseal" for 0x15E); the code in hex for one this table does not list.
    public static func commandName(_ code: UInt32) -> String {
        commandNames[code] ?? "0x" + String(code, radix: 16)
    }

    /// The names of the commands ``commandCodes`` recorded, in order.
    public var commandNames: [String] { commandCodes.map(Self.commandName) }

    private static let commandNames: [UInt32: String] = [
        0x11F: "NV_UndefineSpaceSpecial", 0x120: "EvictControl", 0x121: "HierarchyControl", 0x122: "NV_UndefineSpace",
        0x124: "ChangeEPS", 0x125: "ChangePPS", 0x126: "Clear", 0x127: "ClearControl", 0x128: "ClockSet",
        0x129: "HierarchyChangeAuth", 0x12A: "NV_DefineSpace", 0x12B: "PCR_Allocate", 0x12C: "PCR_SetAuthPolicy",
        0x12D: "PP_Commands", 0x12E: "SetPrimaryPolicy", 0x12F: "FieldUpgradeStart", 0x130: "ClockRateAdjust",
        0x131: "CreatePrimary", 0x132: "NV_GlobalWriteLock", 0x133: "GetCommandAuditDigest", 0x134: "NV_Increment",
        0x135: "NV_SetBits", 0x136: "NV_Extend", 0x137: "NV_Write", 0x138: "NV_WriteLock",
        0x139: "DictionaryAttackLockReset", 0x13A: "DictionaryAttackParameters", 0x13B: "NV_ChangeAuth",
        0x13C: "PCR_Event", 0x13D: "PCR_Reset", 0x13E: "SequenceComplete", 0x13F: "SetAlgorithmSet",
        0x140: "SetCommandCodeAuditStatus", 0x141: "FieldUpgradeData", 0x142: "IncrementalSelfTest", 0x143: "SelfTest",
        0x144: "Startup", 0x145: "Shutdown", 0x146: "StirRandom", 0x147: "ActivateCredential", 0x148: "Certify",
        0x149: "PolicyNV", 0x14A: "CertifyCreation", 0x14B: "Duplicate", 0x14C: "GetTime",
        0x14D: "GetSessionAuditDigest",
        0x14E: "NV_Read", 0x14F: "NV_ReadLock", 0x150: "ObjectChangeAuth", 0x151: "PolicySecret", 0x152: "Rewrap",
        0x153: "Create", 0x154: "ECDH_ZGen", 0x155: "HMAC", 0x156: "Import", 0x157: "Load", 0x158: "Quote",
        0x159: "RSA_Decrypt", 0x15B: "HMAC_Start", 0x15C: "SequenceUpdate", 0x15D: "Sign", 0x15E: "Unseal",
        0x160: "PolicySigned", 0x161: "ContextLoad", 0x162: "ContextSave", 0x163: "ECDH_KeyGen",
        0x164: "EncryptDecrypt",
        0x165: "FlushContext", 0x167: "LoadExternal", 0x168: "MakeCredential", 0x169: "NV_ReadPublic",
        0x16A: "PolicyAuthorize", 0x16B: "PolicyAuthValue", 0x16C: "PolicyCommandCode", 0x16D: "PolicyCounterTimer",
        0x16E: "PolicyCpHash", 0x16F: "PolicyLocality", 0x170: "PolicyNameHash", 0x171: "PolicyOR",
        0x172: "PolicyTicket",
        0x173: "ReadPublic", 0x174: "RSA_Encrypt", 0x176: "StartAuthSession", 0x177: "VerifySignature",
        0x178: "ECC_Parameters", 0x179: "FirmwareRead", 0x17A: "GetCapability", 0x17B: "GetRandom",
        0x17C: "GetTestResult", 0x17D: "Hash", 0x17E: "PCR_Read", 0x17F: "PolicyPCR", 0x180: "PolicyRestart",
        0x181: "ReadClock", 0x182: "PCR_Extend", 0x183: "PCR_SetAuthValue", 0x184: "NV_Certify",
        0x185: "EventSequenceComplete", 0x186: "HashSequenceStart", 0x187: "PolicyPhysicalPresence",
        0x188: "PolicyDuplicationSelect", 0x189: "PolicyGetDigest", 0x18A: "TestParms", 0x18B: "Commit",
        0x18C: "PolicyPassword", 0x18D: "ZGen_2Phase", 0x18E: "EC_Ephemeral", 0x18F: "PolicyNvWritten",
        0x190: "PolicyTemplate", 0x191: "CreateLoaded", 0x192: "PolicyAuthorizeNV", 0x193: "EncryptDecrypt2",
    ]
}

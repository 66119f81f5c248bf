// TPM 2.0 Part 3 §25 "Dictionary Attack Functions": TPM2_DictionaryAttackLockReset (§25.2) and
// TPM2_DictionaryAttackParameters (§25.3), both authorized by TPM_RH_LOCKOUT. A fresh swtpm has
// an empty lockout password, so a password session with an empty HMAC suffices.

enum DictionaryAttackCommands {
    static let lockResetCode: UInt32 = 0x0000_0139 // TPM_CC_DictionaryAttackLockReset
    static let parametersCode: UInt32 = 0x0000_013A // TPM_CC_DictionaryAttackParameters

    static func lockReset() -> [UInt8] {
        TPMCommandBuilder(code: lockResetCode, authorizingHandle: TPMConstant.lockoutHierarchy).build()
    }

    static func parameters(maxTries: UInt32, recoveryTime: UInt32, lockoutRecovery: UInt32) -> [UInt8] {
        TPMCommandBuilder(code: parametersCode, authorizingHandle: TPMConstant.lockoutHierarchy)
            .appending(maxTries)
            .appending(recoveryTime)
            .appending(lockoutRecovery)
            .build()
    }
}

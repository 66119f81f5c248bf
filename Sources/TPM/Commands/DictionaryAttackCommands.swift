internal import CTSS2

/// TPM 2.0 Part 3 §25 Dictionary Attack Functions: TPM2_DictionaryAttackLockReset.
extension Engine {
    /// TPM2_DictionaryAttackLockReset with an empty lockout authorization, in a password session:
    /// nothing secret is sent.
    ///
    /// - Throws: ``TPMError``; `.authorizationFailed` or `.lockout` when the lockout hierarchy
    ///   has a password or is itself locked out.
    func resetDictionaryAttackLockout() throws {
        try check(
            Esys_DictionaryAttackLockReset(
                esys, ESYS_TR(ESYS_TR_RH_LOCKOUT), ESYS_TR(ESYS_TR_PASSWORD),
                ESYS_TR(ESYS_TR_NONE), ESYS_TR(ESYS_TR_NONE)),
            "Esys_DictionaryAttackLockReset")
    }
}

extension TPMConnection {
    /// Clears the dictionary-attack failure count and ends a lockout, when the TPM's lockout
    /// hierarchy has no password (swtpm's default, and the usual state of a simulated TPM).
    ///
    /// The lockout hierarchy's password state is read first: when one is set, nothing is tried,
    /// because a wrong lockout authorization locks the lockout hierarchy itself for
    /// TPM_PT_LOCKOUT_RECOVERY seconds.
    ///
    /// - Throws: ``TPMError`` `.authorizationFailed` when a lockout password is set (use
    ///   `tpm2_dictionarylockout -c -p <password>`), or what the TPM reports.
    public func resetDictionaryAttackLockout() throws {
        try withEngine { engine in
            let permanent = try engine.properties(from: TPMProperty.permanent, count: 1)[TPMProperty.permanent] ?? 0
            guard permanent & TPMProperty.lockoutAuthSetBit == 0 else {
                throw TPMError(
                    .authorizationFailed,
                    "The TPM's lockout hierarchy has a password, so TPMKeychain does not try to reset the lockout (a wrong guess would lock the lockout hierarchy too); whoever set it can run: tpm2_dictionarylockout --clear-lockout --auth <password>"
                )
            }
            try engine.resetDictionaryAttackLockout()
        }
    }
}

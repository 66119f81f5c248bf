// TPM 2.0 Part 3 §30.2 TPM2_GetCapability(TPM_CAP_TPM_PROPERTIES) over the PT_VAR group
// (Part 2 §6.13): the TPM's changing state, as opposed to describe()'s fixed identity.

extension TPMConnection {
    /// The TPM's dictionary-attack state and how many NV counters are defined.
    ///
    /// Reads only variable properties; it needs no authorization and changes nothing, so it is
    /// safe to call while the TPM is in lockout, which is when it is most useful.
    ///
    /// - Throws: ``TPMError`` if the TPM cannot be asked.
    public func dictionaryAttackStatus() throws -> TPMDictionaryAttackStatus {
        try withEngine { engine in
            let first = TPMProperty.permanent
            let properties = try engine.properties(from: first, count: TPMProperty.lockoutRecovery - first + 1)
            let permanent = properties[TPMProperty.permanent] ?? 0
            return TPMDictionaryAttackStatus(
                failedAuthorizations: properties[TPMProperty.lockoutCounter] ?? 0,
                maxAuthorizationFailures: properties[TPMProperty.maxAuthFail] ?? 0,
                recoveryInterval: properties[TPMProperty.lockoutInterval] ?? 0,
                lockoutRecovery: properties[TPMProperty.lockoutRecovery] ?? 0,
                inLockout: permanent & TPMProperty.inLockoutBit != 0,
                nvCounters: properties[TPMProperty.nvCounters] ?? 0,
                nvCountersAvailable: properties[TPMProperty.nvCountersAvailable] ?? 0,
                ownerAuthorizationSet: permanent & TPMProperty.ownerAuthSetBit != 0,
                lockoutAuthorizationSet: permanent & TPMProperty.lockoutAuthSetBit != 0)
        }
    }
}

extension TPMConnection {
    /// Identifies the TPM's current power-on session: it changes whenever the TPM resets or
    /// restarts (TPMS_CLOCK_INFO resetCount and restartCount, from TPM2_ReadClock), so anything
    /// cached "since the person authenticated" can be dropped across a reboot.
    ///
    /// - Throws: ``TPMError``.
    public func startupEpoch() throws -> UInt64 {
        try withEngine { engine in
            let counts = try engine.startupCounts()
            return UInt64(counts.reset) << 32 | UInt64(counts.restart)
        }
    }
}

/// What ``TPMConnection/dictionaryAttackStatus()`` reports: TPM_PT_LOCKOUT_COUNTER (0x20E),
/// TPM_PT_MAX_AUTH_FAIL (0x20F), TPM_PT_LOCKOUT_INTERVAL (0x210), TPM_PT_LOCKOUT_RECOVERY (0x211),
/// TPMA_PERMANENT.inLockout (0x200, bit 9), ownerAuthSet (bit 0) and lockoutAuthSet (bit 2),
/// TPM_PT_NV_COUNTERS (0x20A) and TPM_PT_NV_COUNTERS_AVAIL (0x20B).
public struct TPMDictionaryAttackStatus: Sendable, Hashable {
    /// Authorization failures currently counted against objects with dictionary-attack protection.
    public let failedAuthorizations: UInt32
    /// How many failures put the TPM into lockout.
    public let maxAuthorizationFailures: UInt32
    /// Seconds after which one counted failure is forgotten; 0 means protection is off.
    public let recoveryInterval: UInt32
    /// Seconds before the lockout authorization may be tried again after it failed.
    public let lockoutRecovery: UInt32
    /// Whether the TPM refuses authorizations with dictionary-attack protection right now.
    public let inLockout: Bool
    /// NV indices of type counter currently defined (every owner, not only this library's).
    public let nvCounters: UInt32
    /// How many more NV counters the TPM estimates it could define (TPM_PT_NV_COUNTERS_AVAIL,
    /// 0x20B): each store's rollback counter and each device's counters take one.
    public let nvCountersAvailable: UInt32
    /// Whether the owner hierarchy has an authorization value (TPMA_PERMANENT.ownerAuthSet): the
    /// storage key and NV indices then need it (`TPM_KEYCHAIN_OWNER_AUTH`).
    public let ownerAuthorizationSet: Bool
    /// Whether the lockout hierarchy has one (TPMA_PERMANENT.lockoutAuthSet): resetting the
    /// lockout then needs it.
    public let lockoutAuthorizationSet: Bool
}

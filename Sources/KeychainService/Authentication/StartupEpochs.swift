import SystemCalls

/// The last startup epoch (``TPM/TPMConnection/startupEpoch()``: reset and restart counts) this
/// process read from each TPM, so that a key opened for the reuse window needs no TPM2_ReadClock
/// of its own once the process has read one.
///
/// A key is kept with the epoch last read, which is never later than the epoch it was opened in:
/// the counts only grow, so if the TPM reset or restarted between that read and any later check,
/// the check reads another epoch and the key is dropped. The worst an old value costs is one
/// authentication more after a reset, never a key kept across one.
enum StartupEpochs {
    private static let known = Locked<[String: UInt64]>([:])

    static func last(for tcti: String) -> UInt64? {
        known.withLock { $0[tcti] }
    }

    static func record(_ epoch: UInt64, for tcti: String) {
        known.withLock { $0[tcti] = epoch }
    }
}

import KeychainStore
import KeychainVocabulary

/// Where a desktop reports whether the person's session is locked (the screen locker), so that
/// whenUnlocked items are refused while it is, as iOS refuses them while the device is locked.
///
/// Set one on a ``KeychainLocation`` (``KeychainLocation/sessionLock``); `LogindSessionLock` in
/// TPMKeychainFprintd reads systemd-logind's `LockedHint`. Without one, only the keychain's own
/// lock (``KeychainDevice/lock()``) counts. This check is the library's, not the TPM's: see
/// docs/SECURITY.md.
public protocol SessionLockState: Sendable {
    /// Whether the session is locked now. Called on every read of a whenUnlocked item, so it
    /// should answer from a cache kept current by notifications rather than ask each time.
    ///
    /// - Throws: when the state cannot be known; the read then fails as if locked.
    func isLocked() throws -> Bool

    /// How many times the session has gone from unlocked to locked, counting a lock that was
    /// undone before anyone looked (a short screen lock between two looks); nil when the source
    /// cannot count, and then only ``isLocked()`` is seen. Read from a cache, as ``isLocked()``.
    ///
    /// - Throws: when the state cannot be known.
    func timesLocked() throws -> UInt64?
}

extension SessionLockState {
    /// nil: a source that only says whether the session is locked now.
    public func timesLocked() throws -> UInt64? { nil }
}

extension KeychainLocation {
    /// Whether the login session's lock refuses an item of `accessibility` now (a state that
    /// cannot be known counts as locked).
    func sessionIsLocked(for accessibility: Accessibility) -> Bool {
        guard let sessionLock, accessibility.lockRequirement == .unlocked else { return false }
        return (try? sessionLock.isLocked()) ?? true
    }
}

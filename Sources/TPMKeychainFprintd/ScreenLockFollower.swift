import Foundation
public import TPMKeychain

/// Locks the keychain when the login session's screen locks: the device's lock state (the TPM
/// NV index that whenUnlocked items' policies read) follows the session's lock
/// (``LogindSessionLock``), so a locked screen locks whenUnlocked items for every process, not
/// only for those that ask logind. Unlocking takes the passcode again: the screen locker's PAM
/// stack with `tpm-keychain pam-hook` gives it (README, "Unlock with your login"), or
/// `unlock-keychain`.
///
/// `tpm-keychain follow-screen-lock` runs one for the user's session (a systemd user service).
public enum ScreenLockFollower {
    /// Follows `sessionLock` until it can no longer say (the session ended, the bus went away) or
    /// `shouldStop` says so, calling `lockKeychain` each time the session goes from unlocked to
    /// locked (a session already locked when this starts is not locked again).
    ///
    /// - Parameters:
    ///   - lockKeychain: locks the device (``KeychainDevice/lock()``); called on this thread.
    ///   - pollInterval: how often the cached lock state is read (memory only, no bus traffic).
    ///   - onLock: told after each lock, for logs and tests.
    /// - Returns: why it stopped: the session lock's error, or nil when `shouldStop` said so.
    public static func run(
        sessionLock: any SessionLockState, lockKeychain: () throws -> Void,
        pollInterval: Duration = .milliseconds(200), shouldStop: () -> Bool = { false },
        onLock: (Result<Void, any Error>) -> Void = { _ in }
    ) -> (any Error)? {
        var previous: Bool?
        while !shouldStop() {
            let locked: Bool
            do {
                locked = try sessionLock.isLocked()
            } catch {
                return error
            }
            if locked, previous == false {
                do {
                    try lockKeychain()
                    onLock(.success(()))
                } catch {
                    onLock(.failure(error))
                }
            }
            previous = locked
            let (seconds, attoseconds) = pollInterval.components
            Thread.sleep(forTimeInterval: Double(seconds) + Double(attoseconds) / 1e18)
        }
        return nil
    }
}

import FoundationEssentials
import SystemCalls
public import TPMKeychain

/// Locks the keychain when the login session's screen locks: the device's lock state (the TPM
/// NV index that whenUnlocked items' policies read) follows the session's lock
/// (``LogindSessionLock``), so a locked screen locks whenUnlocked items for every process, not
/// only for those that ask logind. Unlocking takes the passcode again: the screen locker's PAM
/// stack with pam_tpm_keychain.so gives it (README, "Unlock with your login"), or
/// `unlock-keychain`.
///
/// `tpm-keychain follow-screen-lock` runs one for the user's session (a systemd user service).
public enum ScreenLockFollower {
    /// Follows `sessionLock` until it can no longer say (the session ended, the bus went away) or
    /// `shouldStop` says so, calling `lockKeychain` each time the session goes from unlocked to
    /// locked (a session already locked when this starts is not locked again). Every lock is
    /// seen, also one undone between two looks, where the session lock counts them
    /// (``SessionLockState/timesLocked()``, as ``LogindSessionLock`` does).
    ///
    /// It fails closed: when the session's state can no longer be known for any reason but the
    /// session's end or a stop (the bus or logind went away, an answer could not be read), it
    /// locks the keychain before it returns, since the screen may have locked unseen. Run it
    /// under a supervisor that starts it again (systemd's `Restart=on-failure`).
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
        func lock() {
            do {
                try lockKeychain()
                onLock(.success(()))
            } catch {
                onLock(.failure(error))
            }
        }
        var previous: (locked: Bool, timesLocked: UInt64?)?
        while !shouldStop() {
            let now: (locked: Bool, timesLocked: UInt64?)
            do {
                now = (try sessionLock.isLocked(), try sessionLock.timesLocked())
            } catch {
                if endsQuietly(error) { return error }
                lock()
                return error
            }
            if let previous {
                let lockedSince =
                    if let before = previous.timesLocked, let after = now.timesLocked {
                        after > before
                    } else {
                        now.locked && !previous.locked
                    }
                if lockedSince { lock() }
            }
            previous = now
            sleep(for: pollInterval)
        }
        return nil
    }

    /// Whether `error` is a stop without a doubt about the lock: the session ended (its last
    /// close locks through the PAM module) or the follower was stopped.
    public static func endsQuietly(_ error: any Error) -> Bool {
        guard let error = error as? LogindSessionLockError else { return false }
        return error.code == .noSession || error.code == .stopped
    }
}

import ArgumentParser
import CommandLineSupport
import FoundationEssentials
import SystemCalls
import TPMKeychain
import TPMKeychainFprintd
import ToolSupport
import WireFormat

#if canImport(Glibc)
import Glibc
#endif

/// `login-unlock on|off|status`: whether logging in unlocks this user's keychain (`pam-hook`).
struct LoginUnlock: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "login-unlock",
        abstract: "Turn on or off unlocking the keychain with your login password (needs pam_tpm_keychain.so; README).",
        discussion: """
            Turn it on only when your keychain passcode is your login password: each login then \
            unlocks the keychain with it, and closing your last session locks it. A login password \
            that does not open the keychain counts one failure toward the TPM's lockout, once: the \
            hook then turns this setting off and says so in `status`.
            """)

    enum Setting: String, ExpressibleByArgument, CaseIterable {
        case on, off, status
    }

    @Argument(help: "on, off or status.")
    var setting: Setting = .status

    func run() throws {
        let marker = LoginUnlockMarker.path
        switch setting {
        case .on:
            try LoginUnlockMarker.write("on\n")
            print("login unlock: on (\(marker))")
        case .off:
            unlink(marker)
            print("login unlock: off")
        case .status:
            switch LoginUnlockMarker.read() {
            case "on"?: print("login unlock: on")
            case let reason?:
                print("login unlock: off (the hook turned it off: \(reason))")
            case nil: print("login unlock: off")
            }
        }
    }
}

/// The per-user setting: `$XDG_CONFIG_HOME/tpm-keychain/unlock-at-login` (else `~/.config/...`),
/// "on", or why the hook turned it off. Only this user's own regular file counts.
enum LoginUnlockMarker {
    static var directory: String {
        let environment = ProcessInfo.processInfo.environment
        let config =
            environment["XDG_CONFIG_HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil }
            ?? (environment["HOME"] ?? FileManager.default.homeDirectoryForCurrentUser.path) + "/.config"
        return config + "/tpm-keychain"
    }

    static var path: String { directory + "/unlock-at-login" }

    /// The first line of the marker; nil when there is none (or it is not this user's file).
    static func read() -> String? {
        var status = stat()
        guard lstat(path, &status) == 0, status.st_mode & S_IFMT == S_IFREG, status.st_uid == geteuid(),
            status.st_size < 4096, let text = try? String(contentsOfFile: path, encoding: .utf8)
        else { return nil }
        return text.split(separator: "\n").first.map(String.init)
    }

    static func write(_ text: String) throws {
        let parent = directory.lastIndex(of: "/").map { String(directory[..<$0]) } ?? directory
        for path in [parent, directory] {
            if mkdir(path, 0o700) != 0 && errno != EEXIST {
                throw CommandFailure(ExitStatus.ioError, "cannot make \(path): \(String(cString: strerror(errno)))")
            }
        }
        let temporary = path + ".new"
        unlink(temporary)
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw CommandFailure(ExitStatus.ioError, "cannot write \(temporary): \(String(cString: strerror(errno)))")
        }
        let bytes = Array(text.utf8)
        let written = Glibc.write(descriptor, bytes, bytes.count)
        close(descriptor)
        guard written == bytes.count, rename(temporary, path) == 0 else {
            unlink(temporary)
            throw CommandFailure(ExitStatus.ioError, "cannot write \(path): \(String(cString: strerror(errno)))")
        }
    }
}

/// `pam-hook`: run by pam_tpm_keychain.so (Sources/PAMModule), the PAM module that keeps the
/// login password from the auth stack until PAM has accepted it. At open_session (and at setcred,
/// which is how a screen locker reports a successful re-authentication) it unlocks the user's
/// keychain with that password, when the user turned `login-unlock` on; at close_session of the
/// user's last session it locks it. It never fails a login: every outcome exits 0, and the
/// module's lines are `optional`.
///
/// The module runs it as the user PAM_USER names, with a clean environment; run as root anyway
/// (an old pam_exec session line), it first becomes that user for good, before it reads any of
/// the user's files. The password arrives on standard input and is held as SecretBytes only,
/// never written. An old pam_exec auth line (PAM_TYPE=auth) is not acted on: it runs for every
/// password typed, also one the password module before it has just rejected.
struct PAMHook: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pam-hook",
        abstract: "Unlock the keychain at login and lock it at logout (run by pam_tpm_keychain.so; see README).",
        discussion: """
            Install the module with Scripts/install-pam-module.sh, then in /etc/pam.d/<service>:
              auth     optional  pam_tpm_keychain.so    (right after the password check)
              session  optional  pam_tpm_keychain.so
            The module runs this command as the user once PAM has accepted the password: at \
            open_session, or at setcred for a screen locker, with the password on standard input. \
            pam_exec auth lines are no longer acted on. Each user opts in with \
            `tpm-keychain login-unlock on`.
            """)

    func run() throws {
        let environment = ProcessInfo.processInfo.environment
        guard let type = environment["PAM_TYPE"], let user = environment["PAM_USER"], !user.isEmpty else {
            printError("tpm-keychain pam-hook: not run by PAM (PAM_TYPE and PAM_USER are not set)")
            throw ExitCode(ExitStatus.usage)
        }
        switch type {
        case "open_session", "setcred", "close_session":
            break
        case "auth":
            printError(
                "tpm-keychain pam-hook: pam_exec auth lines are no longer acted on (they see every password typed, also rejected ones); use pam_tpm_keychain.so (README, \"Unlock with your login\")"
            )
            return
        default:
            return
        }
        let unlocking = type != "close_session"
        // The whole input first: the module wrote the password and closed the pipe before it
        // started us; nothing else is read before the user's identity is taken.
        let token = unlocking ? Self.readToken() : nil
        guard Self.become(user) else { return }
        guard LoginUnlockMarker.read() == "on" else { return }
        let path = KeychainLocation.default.path
        do {
            // The device (passcode, lock state) is the user's on this TPM, with or without a
            // store; a store with a simulated TPM of its own says which TPM that is.
            let act = { (location: KeychainLocation) throws in
                let device = KeychainDevice(location: location)
                if unlocking {
                    guard let token, token.count > 0, try device.status().passcodeIsSet else { return }
                    try device.unlock(passcode: token)
                } else if Self.isLastSession(of: user) {
                    try device.lock()
                }
            }
            if (try? KeychainLocation(path: path).storeExists) == true {
                try StoreSession.withExisting(path) { try act($0.location) }
            } else {
                try act(try KeychainLocation(path: path))
            }
        } catch let error as KeychainError where error.code == .authenticationFailed {
            // Not the keychain passcode: stop spending the TPM's lockout tries at every login.
            try? LoginUnlockMarker.write(
                "the login password did not open the keychain on \(Date()); make them the same (change-passcode), then login-unlock on\n"
            )
        } catch {
            // A login is never refused for the keychain's sake; the next unlock-keychain says why.
        }
    }

    /// The password on standard input, read to its end: at most 4 KiB, as the module writes
    /// (nil when there is more). pam_exec wrote a NUL after it; what follows a NUL is not
    /// part of it.
    static func readToken() -> SecretBytes? {
        var count = 0
        let buffer = SecretBytes(count: 4097) { raw in
            while count < raw.count {
                let read = Glibc.read(STDIN_FILENO, raw.baseAddress! + count, raw.count - count)
                if read < 0, errno == EINTR { continue }
                guard read > 0 else { break }
                count += read
            }
        }
        guard count < buffer.count else { return nil }
        return buffer.withUnsafeBytes { bytes in
            let length = bytes[0..<count].firstIndex(of: 0).map { $0 - bytes.startIndex } ?? count
            return SecretBytes(copying: UnsafeRawBufferPointer(rebasing: bytes[0..<length]))
        }
    }

    /// As root, becomes `user` for good (groups, gid, uid) with that user's home and default
    /// directories; as anyone else, goes on only when already that user.
    static func become(_ user: String) -> Bool {
        guard let entry = getpwnam(user) else { return false }
        let uid = entry.pointee.pw_uid
        let gid = entry.pointee.pw_gid
        let home = String(cString: entry.pointee.pw_dir)
        if geteuid() == 0 && uid != 0 {
            guard initgroups(user, gid) == 0, setgid(gid) == 0, setuid(uid) == 0 else { return false }
            // setuid from root is for good: getting root back must fail.
            guard getuid() == uid, geteuid() == uid, setuid(0) != 0 else { return false }
        } else if geteuid() != uid {
            return false
        }
        setenv("HOME", home, 1)
        setenv("USER", user, 1)
        setenv("LOGNAME", user, 1)
        for variable in ["XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"] {
            unsetenv(variable)
        }
        var status = stat()
        let runtime = "/run/user/\(uid)"
        if stat(runtime, &status) == 0, status.st_uid == uid {
            setenv("XDG_RUNTIME_DIR", runtime, 1)
        } else {
            unsetenv("XDG_RUNTIME_DIR")
        }
        return true
    }

    /// Whether the session closing is the user's last: no other session of the user is in a state
    /// but "closing". A session that lingers after its logout (processes left running, as with
    /// KillUserProcesses=no) is "closing" and does not keep the keychain unlocked; neither does
    /// this session, named by `XDG_SESSION_ID` when the module passed it (pam_systemd's). True
    /// when logind cannot say: the keychain then locks.
    static func isLastSession(of user: String) -> Bool {
        guard let sessions = loginctl(["show-user", user, "--property=Sessions", "--value"]) else { return true }
        let closing = ProcessInfo.processInfo.environment["XDG_SESSION_ID"]
        let others = sessions.split(whereSeparator: \.isWhitespace).map(String.init).filter { $0 != closing }
        let open = others.filter { session in
            let state = loginctl(["show-session", session, "--property=State", "--value"])
            return state.map { $0.trimmingWhitespace() != "closing" } ?? false
        }
        // Without this session's ID, it is among the others, and counts as one of them.
        return open.count <= (closing == nil ? 1 : 0)
    }

    /// loginctl's output (found in PATH, which the module sets), or nil when it fails.
    private static func loginctl(_ arguments: [String]) -> String? {
        guard let run = try? ChildProcess.run("/usr/bin/env", arguments: ["loginctl"] + arguments),
            run.termination == .exited(0)
        else { return nil }
        return String(decoding: run.output, as: UTF8.self)
    }
}

/// `follow-screen-lock`: locks the keychain whenever the login session's screen locks, until the
/// session ends. Run it as a systemd user service (README).
struct FollowScreenLock: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "follow-screen-lock",
        abstract: "Lock the keychain each time the screen locks (logind's LockedHint), until the session ends.",
        discussion: """
            Unlocking takes the passcode: the screen locker's PAM stack with \
            pam_tpm_keychain.so, or unlock-keychain. Exits 0 when the session ends. When the \
            session's state can no longer be known (the bus or logind went away), it locks the \
            keychain and exits 69, for its unit to start it again (Restart=on-failure, README).
            """)

    @OptionGroup var store: KeychainOptions

    func run() throws {
        try reportingErrors {
            let sessionLock: LogindSessionLock
            do {
                sessionLock = try LogindSessionLock()
            } catch {
                throw CommandFailure(ExitStatus.unavailable, "cannot follow the session's screen lock: \(error)")
            }
            defer { sessionLock.stop() }
            printError("tpm-keychain follow-screen-lock: following \(sessionLock.sessionPath)")
            let path = store.path
            let reason = ScreenLockFollower.run(
                sessionLock: sessionLock,
                lockKeychain: { try Self.lockDevice(path) },
                onLock: { result in
                    if case .failure(let error) = result {
                        printError("tpm-keychain follow-screen-lock: the keychain could not be locked: \(error)")
                    }
                })
            printError("tpm-keychain follow-screen-lock: stopped: \(reason.map { "\($0)" } ?? "asked to")")
            if let reason, !ScreenLockFollower.endsQuietly(reason) {
                // The keychain was locked (fail closed); non-zero so that systemd restarts us.
                throw ExitCode(ExitStatus.unavailable)
            }
        }
    }

    /// Locks the user's device; a session only for the moment (a store's own simulated TPM is
    /// not held between locks).
    static func lockDevice(_ path: String) throws {
        if (try? KeychainLocation(path: path).storeExists) == true {
            try StoreSession.withExisting(path) { try KeychainDevice(location: $0.location).lock() }
        } else {
            try KeychainDevice(location: try KeychainLocation(path: path)).lock()
        }
    }
}

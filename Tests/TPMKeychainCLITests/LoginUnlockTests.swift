import Foundation
import TPMKeychainTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `pam-hook` under real PAM: pamtester drives a service file that loads pam_tpm_keychain.so
/// (built from Sources/PAMModule by Scripts/install-pam-module.sh) and runs the installed tool, as
/// GDM, SDDM or sshd would, for a user made with useradd who has a login password.
@Suite("login unlock", .serialized)
struct LoginUnlockTests {
    static let password = "login password 4711"

    /// The auth lines before the module's: what decides whether PAM accepts a password.
    enum Stack {
        /// Debian's common-auth: pam_unix, then pam_deny when it fails, so a rejected password
        /// never reaches the module's line.
        case debianCommonAuth
        /// A stack that goes on after a rejected password: the module's line is handed the wrong
        /// password too, and must keep it from the keychain.
        case requiredUnix
        /// An authentication without a password, as a fingerprint or smartcard login is.
        case noPassword

        var authLines: String {
            switch self {
            case .debianCommonAuth: "@include common-auth"
            case .requiredUnix: "auth     required  pam_unix.so"
            case .noPassword: "auth     required  pam_permit.so"
            }
        }
    }

    /// A user with a home and a login password of their own, the tool where they may run it, the
    /// module, a PAM service for the test, and the fixture's swtpm; all removed afterwards.
    final class PAMFixture {
        let cli: CLIFixture
        let user: String
        let directory: String
        let home: String
        let tool: String
        let module: String
        let service: String

        init(stack: Stack) throws {
            cli = try CLIFixture()
            user = "tkpam" + String(UInt32.random(in: 0...UInt32.max), radix: 36)
            var template = Array("/tmp/login-unlock-XXXXXX".utf8CString)
            guard let made = mkdtemp(&template) else { throw CLIError("mkdtemp failed") }
            directory = String(cString: made)
            chmod(directory, 0o755)
            home = directory + "/home"
            tool = directory + "/tpm-keychain"
            module = directory + "/pam_tpm_keychain.so"
            service = "tpm-keychain-test-" + user
            try CLI.install(at: tool)
            // The module as README has an administrator build it, into the test's directory.
            let script = ProjectFixtures.directory.deletingLastPathComponent()
                .appendingPathComponent("Scripts/install-pam-module.sh").path
            _ = try SystemTool.output(script, ["--output", directory])
            try SystemTool.run("/usr/sbin/useradd", ["-M", "-N", "-d", home, "-s", "/usr/sbin/nologin", user])
            try FileManager.default.createDirectory(
                atPath: home, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
            guard let entry = getpwnam(user), chown(home, entry.pointee.pw_uid, entry.pointee.pw_gid) == 0 else {
                throw CLIError("cannot give \(home) to \(user)")
            }
            try setLoginPassword(LoginUnlockTests.password)
            // What a distribution's /etc/pam.d/<service> gains (README); the TCTI only because the
            // test's TPM is a swtpm on a loopback port.
            // PATH: a test may put a loginctl of its own first (bin/, see fakeLogind).
            let hook =
                "/usr/bin/env PATH=\(directory)/bin:/usr/local/bin:/usr/bin:/bin TPM_KEYCHAIN_TCTI=\(cli.simulator.tcti) \(tool) pam-hook"
            let options = "timeout=60 log=\(logPath)"
            // pam_env gives the session an XDG_SESSION_ID when a test writes pam-env, as
            // pam_systemd does on a real login.
            let configuration = """
                \(stack.authLines)
                auth     optional  \(module) \(options) \(hook)
                account  required  pam_permit.so
                session  required  pam_permit.so
                session  optional  pam_env.so readenv=1 envfile=\(directory)/pam-env user_readenv=0
                session  optional  \(module) \(options) \(hook)

                """
            try configuration.write(toFile: "/etc/pam.d/" + service, atomically: true, encoding: .utf8)
        }

        deinit {
            unlink("/etc/pam.d/" + service)
            try? SystemTool.run("/usr/sbin/userdel", [user])
            try? FileManager.default.removeItem(atPath: directory)
        }

        /// The user's login password, as passwd would set it (given on a pipe, written nowhere).
        func setLoginPassword(_ password: String) throws {
            let result = try CLI.run(
                [], environment: [:], stdin: Data("\(user):\(password)\n".utf8), executable: "/usr/sbin/chpasswd")
            guard result.status == 0 else { throw CLIError("chpasswd failed: \(result)") }
        }

        /// The tool as the user, on the fixture's TPM and the user's default store.
        func asUser(_ arguments: [String], stdin: String? = nil) throws -> CLIResult {
            try CLI.run(
                ["-u", user, "--", "/usr/bin/env", "HOME=\(home)", "TPM_KEYCHAIN_TCTI=\(cli.simulator.tcti)", tool]
                    + arguments,
                environment: [:], stdin: stdin.map { Data($0.utf8) }, executable: "/usr/sbin/runuser")
        }

        /// pamtester as root, for the user, all operations on one PAM handle: the password, if
        /// asked, from standard input.
        func pam(_ operations: [String], password: String = LoginUnlockTests.password) throws -> CLIResult {
            try CLI.run(
                [service, user] + operations, environment: [:], stdin: Data((password + "\n").utf8),
                executable: "/usr/bin/pamtester")
        }

        /// The module's log=, in the user's home: it opens it as the user, so it exists once the
        /// hook has run.
        var logPath: String { home + "/pam.log" }

        /// What the hook wrote.
        var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "(no log)" }

        /// Who made the log: the user the hook ran as.
        var logOwner: uid_t? {
            var status = stat()
            return lstat(logPath, &status) == 0 ? status.st_uid : nil
        }

        var uid: uid_t? { getpwnam(user).map { $0.pointee.pw_uid } }

        func lockState() throws -> String {
            let status = try asUser(["tpm-status"])
            return status.stdout.split(separator: "\n").first { $0.contains("lock state:") }.map(String.init)
                ?? "\(status)"
        }

        func failedAuthorizations() throws -> String {
            let status = try asUser(["tpm-status"])
            return status.stdout.split(separator: "\n").first { $0.contains("lockout counter:") }.map(String.init)
                ?? "\(status)"
        }

        /// A loginctl of the test's, first in the hook's PATH: the user has the sessions in
        /// `states` (ID and logind's State), and the session PAM opens is `current`.
        func fakeLogind(current: String, states: [(String, String)]) throws {
            try FileManager.default.createDirectory(atPath: directory + "/bin", withIntermediateDirectories: true)
            try "XDG_SESSION_ID=\(current)\n".write(toFile: directory + "/pam-env", atomically: true, encoding: .utf8)
            try (states.map(\.0).joined(separator: " ") + "\n").write(
                toFile: directory + "/sessions", atomically: true, encoding: .utf8)
            try states.map { "\($0.0) \($0.1)\n" }.joined().write(
                toFile: directory + "/states", atomically: true, encoding: .utf8)
            let script = """
                #!/bin/sh
                case "$1" in
                  show-user) cat \(directory)/sessions ;;
                  show-session) sed -n "s/^$2 //p" \(directory)/states ;;
                  *) exit 1 ;;
                esac

                """
            try script.write(toFile: directory + "/bin/loginctl", atomically: true, encoding: .utf8)
            chmod(directory + "/bin/loginctl", 0o755)
        }

        /// The keychain's passcode set to the login password, locked, with login unlock on or off.
        func prepare(loginUnlock: Bool) throws {
            try asUser(["set-passcode", "--passcode-fd", "0"], stdin: LoginUnlockTests.password + "\n").expectSuccess()
            try asUser(["lock-keychain"]).expectSuccess()
            #expect(try lockState().contains("locked"))
            if loginUnlock { try asUser(["login-unlock", "on"]).expectSuccess() }
        }
    }

    @Test(
        "Logging in with the password that is the keychain passcode unlocks it when the session opens, not before; the last session's close locks it; a login password PAM accepts that is not the passcode costs one lockout try, once, and turns login unlock off; nothing happens without opting in; the password is written nowhere",
        .enabled(if: geteuid() == 0, "needs root: PAM runs as root for a user made with useradd"))
    func loginUnlocksAndLogoutLocks() throws {
        let fixture = try PAMFixture(stack: .debianCommonAuth)
        try fixture.prepare(loginUnlock: false)

        // Not opted in: a login changes nothing and asks the TPM nothing.
        let before = try fixture.failedAuthorizations()
        try fixture.pam(["authenticate", "open_session"]).expectSuccess()
        #expect(!(try fixture.lockState()).contains(" unlocked ("))
        #expect(try fixture.failedAuthorizations() == before)

        try fixture.asUser(["login-unlock", "on"]).expectSuccess()
        // Authenticating alone unlocks nothing: the module only keeps the password.
        try fixture.pam(["authenticate"]).expectSuccess()
        #expect(!(try fixture.lockState()).contains(" unlocked ("))
        try fixture.pam(["authenticate", "open_session"]).expectSuccess()
        let afterLogin = try fixture.lockState()
        #expect(afterLogin.contains(" unlocked ("), "\(afterLogin)\n\(fixture.log)")
        try fixture.pam(["close_session"]).expectSuccess()
        let afterLogout = try fixture.lockState()
        #expect(!afterLogout.contains(" unlocked ("), "\(afterLogout)")

        // A login password that is not the passcode: one failure counted, then login unlock is off.
        try fixture.setLoginPassword("another password")
        try fixture.pam(["authenticate", "open_session"], password: "another password").expectSuccess()
        #expect(!(try fixture.lockState()).contains(" unlocked ("))
        let failures = try fixture.failedAuthorizations()
        #expect(failures.contains("1 failed authorizations"), "\(failures)\n\(fixture.log)")
        let status = try fixture.asUser(["login-unlock", "status"])
        #expect(status.stdout.contains("turned it off"), "\(status)")
        try fixture.pam(["authenticate", "open_session"], password: "another password").expectSuccess()
        #expect(try fixture.failedAuthorizations().contains("1 failed authorizations"))

        // doctor finds the module's service, and calls an old pam_exec line what it is.
        let found = try fixture.asUser(["doctor"])
        #expect(
            found.stdout.contains("PAM runs pam_tpm_keychain.so in ") && found.stdout.contains(fixture.service),
            "\(found)")
        let old = "/etc/pam.d/" + fixture.service + "-pam-exec"
        try "auth optional pam_exec.so expose_authtok quiet /usr/local/bin/tpm-keychain pam-hook\n".write(
            toFile: old, atomically: true, encoding: .utf8)
        defer { unlink(old) }
        let warned = try fixture.asUser(["doctor"])
        #expect(warned.stdout.contains("warning  login: ") && warned.stdout.contains("no longer unlocks"), "\(warned)")

        // The password is in no file of the user's or the test's.
        for path in regularFiles(under: fixture.directory) where !path.hasSuffix("/tpm-keychain") {
            let contents = (try? Data(contentsOf: URL(fileURLWithPath: path))) ?? Data()
            #expect(!contents.contains(Self.password), "\(path) holds the password")
        }
    }

    @Test(
        "A hook that never ends (a TPM that does not answer) is killed after timeout=, with what it started, and the login goes on",
        .enabled(if: geteuid() == 0, "needs root: PAM runs as root for a user made with useradd"))
    func hangingHookDoesNotHoldTheLogin() throws {
        let fixture = try PAMFixture(stack: .debianCommonAuth)
        // A hook that starts a child of its own and never exits; both write their PIDs first.
        let pids = fixture.home + "/hook-pids"
        let hook = fixture.directory + "/hanging-hook"
        try "#!/bin/sh\nsleep 1000 &\necho $! $$ > \(pids)\nwait\n".write(
            toFile: hook, atomically: true, encoding: .utf8)
        chmod(hook, 0o755)
        let service = fixture.service + "-hanging"
        try """
        \(Stack.debianCommonAuth.authLines)
        auth     optional  \(fixture.module) timeout=1 \(hook)
        account  required  pam_permit.so
        session  optional  \(fixture.module) timeout=1 \(hook)

        """.write(toFile: "/etc/pam.d/" + service, atomically: true, encoding: .utf8)
        defer { unlink("/etc/pam.d/" + service) }
        let login = try CLI.run(
            [service, fixture.user, "authenticate", "open_session"], environment: [:],
            stdin: Data((Self.password + "\n").utf8), executable: "/usr/bin/pamtester")
        #expect(login.status == 0, "\(login)")
        // The hook ran (as the user, for pids is theirs) and neither it nor its child is left.
        let started = ((try? String(contentsOfFile: pids, encoding: .utf8)) ?? "").split(separator: " ")
            .compactMap { pid_t($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        #expect(started.count == 2, "the hook did not run")
        // Killed with its process group: gone once the kernel has delivered the signal (a zombie
        // nobody reaps counts as gone). The bound only limits a failure.
        func running(_ pid: pid_t) -> Bool {
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                let state = stat.split(separator: ")").last?.split(separator: " ").first
            else { return false }
            return state != "Z"
        }
        let deadline = ContinuousClock.now + .seconds(60)
        while started.contains(where: running) && ContinuousClock.now < deadline { usleep(10_000) }
        for pid in started { #expect(!running(pid), "process \(pid) of the hook is still running") }
    }

    @Test(
        "A session's close locks the keychain only when no other session of the user is open: another active session keeps it unlocked, one that lingers after its logout (logind's closing) does not",
        .enabled(if: geteuid() == 0, "needs root: PAM runs as root for a user made with useradd"))
    func lastSessionCountsLingeringSessionsAsGone() throws {
        let fixture = try PAMFixture(stack: .debianCommonAuth)
        try fixture.prepare(loginUnlock: true)
        try fixture.pam(["authenticate", "open_session"]).expectSuccess()
        #expect(try fixture.lockState().contains(" unlocked ("), "\(fixture.log)")

        try fixture.fakeLogind(current: "c1", states: [("c1", "active"), ("c2", "active")])
        try fixture.pam(["open_session", "close_session"]).expectSuccess()
        #expect(try fixture.lockState().contains(" unlocked ("), "c2 is open: \(fixture.log)")
        // The closing session itself already "closing" (pam_systemd's close ran first): told
        // apart by its ID, which the module passes from the PAM environment.
        try fixture.fakeLogind(current: "c1", states: [("c1", "closing"), ("c2", "active")])
        try fixture.pam(["open_session", "close_session"]).expectSuccess()
        #expect(try fixture.lockState().contains(" unlocked ("), "c2 is open: \(fixture.log)")

        try fixture.fakeLogind(current: "c1", states: [("c1", "active"), ("c2", "closing")])
        try fixture.pam(["open_session", "close_session"]).expectSuccess()
        let locked = try fixture.lockState()
        #expect(!locked.contains(" unlocked ("), "c2 only lingers: \(locked)\n\(fixture.log)")
    }

    /// A password the stack rejects: pamtester fails, and the keychain sees nothing of it (still
    /// locked, no lockout try spent, login unlock still on, the hook never run); the right
    /// password then unlocks, with the hook run as the user.
    static func rejectedPasswordChangesNothing(_ fixture: PAMFixture) throws {
        try fixture.prepare(loginUnlock: true)
        let before = try fixture.failedAuthorizations()

        let rejected = try fixture.pam(["authenticate", "open_session"], password: "a wrong password")
        #expect(rejected.status != 0, "\(rejected)")
        #expect(!(try fixture.lockState()).contains(" unlocked ("))
        #expect(try fixture.failedAuthorizations() == before)
        let status = try fixture.asUser(["login-unlock", "status"])
        #expect(status.stdout == "login unlock: on\n", "\(status)")
        #expect(fixture.logOwner == nil, "the hook ran: \(fixture.log)")

        try fixture.pam(["authenticate", "open_session"]).expectSuccess()
        let afterLogin = try fixture.lockState()
        #expect(afterLogin.contains(" unlocked ("), "\(afterLogin)\n\(fixture.log)")
        #expect(try fixture.failedAuthorizations() == before)
        // The module opens log= after becoming the user, before it starts the hook.
        let owner = fixture.logOwner
        #expect(owner != nil && owner == fixture.uid, "the log's owner: \(String(describing: owner))")
    }

    @Test(
        "Debian's common-auth: a wrong password is rejected before the module's line and changes nothing; the right one unlocks, the hook running as the user",
        .enabled(if: geteuid() == 0, "needs root: PAM runs as root for a user made with useradd"))
    func debianCommonAuth() throws {
        let fixture = try PAMFixture(stack: .debianCommonAuth)
        try Self.rejectedPasswordChangesNothing(fixture)
    }

    @Test(
        "A stack that goes on after a rejected password (auth required pam_unix.so): the wrong password reaches the module's line but never the keychain; the right one unlocks; a screen locker's re-authentication (setcred REFRESH) unlocks again",
        .enabled(if: geteuid() == 0, "needs root: PAM runs as root for a user made with useradd"))
    func stackThatGoesOnAfterAFailure() throws {
        let fixture = try PAMFixture(stack: .requiredUnix)
        try Self.rejectedPasswordChangesNothing(fixture)

        try fixture.pam(["close_session"]).expectSuccess()
        #expect(!(try fixture.lockState()).contains(" unlocked ("))
        // A screen locker authenticates and refreshes the credentials; it opens no session.
        let before = try fixture.failedAuthorizations()
        let refused = try fixture.pam(["authenticate", "setcred(PAM_REFRESH_CRED)"], password: "a wrong password")
        #expect(refused.status != 0, "\(refused)")
        #expect(!(try fixture.lockState()).contains(" unlocked ("))
        #expect(try fixture.failedAuthorizations() == before)
        try fixture.pam(["authenticate", "setcred(PAM_REFRESH_CRED)"]).expectSuccess()
        let afterUnlock = try fixture.lockState()
        #expect(afterUnlock.contains(" unlocked ("), "\(afterUnlock)\n\(fixture.log)")
    }

    @Test(
        "An authentication without a password (pam_permit, as a fingerprint login): nothing is asked, nothing unlocks, no lockout try is spent, login unlock stays on",
        .enabled(if: geteuid() == 0, "needs root: PAM runs as root for a user made with useradd"))
    func loginWithoutAPassword() throws {
        let fixture = try PAMFixture(stack: .noPassword)
        try fixture.prepare(loginUnlock: true)
        let before = try fixture.failedAuthorizations()

        let login = try fixture.pam(["authenticate", "open_session", "close_session"])
        try login.expectSuccess()
        #expect(!(login.stdout + login.stderr).contains("Password"), "a password was asked for: \(login)")
        #expect(!(try fixture.lockState()).contains(" unlocked ("))
        #expect(try fixture.failedAuthorizations() == before)
        let status = try fixture.asUser(["login-unlock", "status"])
        #expect(status.stdout == "login unlock: on\n", "\(status)")
        // The session opened, so the hook ran, as the user, with nothing to unlock with.
        #expect(fixture.logOwner != nil && fixture.logOwner == fixture.uid, "\(fixture.log)")
    }
}

import Foundation
import TPMKeychainTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `pam-hook` under real PAM: pamtester drives a service file that runs the installed tool with
/// pam_exec, as GDM, SDDM or sshd would, for a user made with useradd.
@Suite("login unlock", .serialized)
struct LoginUnlockTests {
    static let password = "login password 4711"

    /// A user with a home of their own, the tool where they may run it, a PAM service for the
    /// test, and the fixture's swtpm; all removed afterwards.
    final class PAMFixture {
        let cli: CLIFixture
        let user: String
        let directory: String
        let home: String
        let tool: String
        let service: String

        init() throws {
            cli = try CLIFixture()
            user = "tkpam" + String(UInt32.random(in: 0...UInt32.max), radix: 36)
            var template = Array("/tmp/login-unlock-XXXXXX".utf8CString)
            guard let made = mkdtemp(&template) else { throw CLIError("mkdtemp failed") }
            directory = String(cString: made)
            chmod(directory, 0o755)
            home = directory + "/home"
            tool = directory + "/tpm-keychain"
            service = "tpm-keychain-test-" + user
            try CLI.install(at: tool)
            try SystemTool.run("/usr/sbin/useradd", ["-M", "-N", "-d", home, "-s", "/usr/sbin/nologin", user])
            try FileManager.default.createDirectory(
                atPath: home, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
            guard let entry = getpwnam(user), chown(home, entry.pointee.pw_uid, entry.pointee.pw_gid) == 0 else {
                throw CLIError("cannot give \(home) to \(user)")
            }
            // What a distribution's /etc/pam.d/<service> gains (README); the TCTI only because the
            // test's TPM is a swtpm on a loopback port.
            let hook = "/usr/bin/env TPM_KEYCHAIN_TCTI=\(cli.simulator.tcti) \(tool) pam-hook"
            let configuration = """
                auth     optional  pam_exec.so expose_authtok quiet log=\(directory)/pam.log \(hook)
                auth     required  pam_permit.so
                account  required  pam_permit.so
                session  optional  pam_exec.so quiet log=\(directory)/pam.log \(hook)
                session  required  pam_permit.so

                """
            try configuration.write(toFile: "/etc/pam.d/" + service, atomically: true, encoding: .utf8)
        }

        deinit {
            unlink("/etc/pam.d/" + service)
            try? SystemTool.run("/usr/sbin/userdel", [user])
            try? FileManager.default.removeItem(atPath: directory)
        }

        /// The tool as the user, on the fixture's TPM and the user's default store.
        func asUser(_ arguments: [String], stdin: String? = nil) throws -> CLIResult {
            try CLI.run(
                ["-u", user, "--", "/usr/bin/env", "HOME=\(home)", "TPM_KEYCHAIN_TCTI=\(cli.simulator.tcti)", tool]
                    + arguments,
                environment: [:], stdin: stdin.map { Data($0.utf8) }, executable: "/usr/sbin/runuser")
        }

        /// pamtester as root, for the user: the password, if asked, from standard input.
        func pam(_ operations: [String], password: String = LoginUnlockTests.password) throws -> CLIResult {
            try CLI.run(
                [service, user] + operations, environment: [:], stdin: Data((password + "\n").utf8),
                executable: "/usr/bin/pamtester")
        }

        /// What the hook wrote (pam_exec's log=).
        var log: String { (try? String(contentsOfFile: directory + "/pam.log", encoding: .utf8)) ?? "(no log)" }

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
    }

    @Test(
        "Logging in with the password that is the keychain passcode unlocks it, the last session's close locks it; a password that is not the passcode costs one lockout try, once, and turns login unlock off; nothing happens without opting in; the password is written nowhere",
        .enabled(if: geteuid() == 0, "needs root: PAM runs as root for a user made with useradd"))
    func loginUnlocksAndLogoutLocks() throws {
        let fixture = try PAMFixture()
        try fixture.asUser(["set-passcode", "--passcode-fd", "0"], stdin: Self.password + "\n").expectSuccess()
        try fixture.asUser(["lock-keychain"]).expectSuccess()
        #expect(try fixture.lockState().contains("locked"))

        // Not opted in: a login changes nothing and asks the TPM nothing.
        let before = try fixture.failedAuthorizations()
        try fixture.pam(["authenticate"]).expectSuccess()
        #expect(!(try fixture.lockState()).contains(" unlocked ("))
        #expect(try fixture.failedAuthorizations() == before)

        try fixture.asUser(["login-unlock", "on"]).expectSuccess()
        try fixture.pam(["authenticate"]).expectSuccess()
        let afterLogin = try fixture.lockState()
        #expect(afterLogin.contains(" unlocked ("), "\(afterLogin)\n\(fixture.log)")
        try fixture.pam(["open_session", "close_session"]).expectSuccess()
        let afterLogout = try fixture.lockState()
        #expect(!afterLogout.contains(" unlocked ("), "\(afterLogout)")

        // A login password that is not the passcode: one failure counted, then login unlock is off.
        try fixture.pam(["authenticate"], password: "another password").expectSuccess()
        #expect(!(try fixture.lockState()).contains(" unlocked ("))
        let failures = try fixture.failedAuthorizations()
        #expect(failures.contains("1 failed authorizations"), "\(failures)")
        let status = try fixture.asUser(["login-unlock", "status"])
        #expect(status.stdout.contains("turned it off"), "\(status)")
        try fixture.pam(["authenticate"], password: "another password").expectSuccess()
        #expect(try fixture.failedAuthorizations().contains("1 failed authorizations"))

        // The password is in no file of the user's or the test's.
        for path in regularFiles(under: fixture.directory) where !path.hasSuffix("/tpm-keychain") {
            let contents = (try? Data(contentsOf: URL(fileURLWithPath: path))) ?? Data()
            #expect(!contents.contains(Self.password), "\(path) holds the password")
        }
    }
}

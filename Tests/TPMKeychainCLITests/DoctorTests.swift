import Foundation
import TPM
import TPMKeychain
import TPMKeychainTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `tpm-keychain doctor`: a verdict per check, what to do, JSON for scripts, and nothing changed.
@Suite("doctor")
struct DoctorTests {
    struct Report: Decodable {
        struct Finding: Decodable {
            let check: String
            let verdict: String
            let summary: String
            let remedy: String?
        }
        let ready: Bool
        let verdict: String
        let findings: [Finding]

        func finding(_ check: String) -> Finding? { findings.first { $0.check == check } }
    }

    static func doctor(_ fixture: CLIFixture, json: Bool = true) throws -> (CLIResult, Report?) {
        var environment = fixture.environment
        environment["TPM_KEYCHAIN_AUTHENTICATOR"] = "none"
        let result = try CLI.run(
            ["doctor", "--keychain", fixture.store] + (json ? ["--json"] : []), environment: environment)
        let report = json ? try? JSONDecoder().decode(Report.self, from: Data(result.stdout.utf8)) : nil
        return (result, report)
    }

    @Test(
        "On a simulated TPM with a store that has no recovery key, doctor says ready with warnings (exit 0): the TPM is simulated, the lockout counter and NV room are fine, the owner hierarchy has no password (anyone may delete NV indices), and the store needs add-recovery-key; it changes no file"
    )
    func readyWithWarnings() throws {
        let fixture = try CLIFixture()
        try fixture.succeed("add-generic-password", "-s", "svc", "-a", "acct", "-w", "secret")
        let before = Self.snapshot(fixture.directory)

        let (result, decoded) = try Self.doctor(fixture)
        #expect(result.status == 0, "\(result)")
        let report = try #require(decoded, "\(result)")
        #expect(report.ready && report.verdict.hasPrefix("ready, with"), "\(report.verdict)")
        #expect(report.finding("tpm device")?.verdict == "info")
        #expect(report.finding("tpm")?.verdict == "warning")
        #expect(report.finding("tpm")?.summary.contains("simulated TPM") == true)
        #expect(report.finding("lockout")?.verdict == "ok")
        let owner = try #require(report.finding("owner hierarchy"))
        #expect(owner.verdict == "warning" && owner.summary.contains("can delete NV indices"), "\(owner)")
        #expect(owner.remedy?.contains("tpm2_changeauth -c owner") == true, "\(owner)")
        #expect(report.finding("nv room")?.verdict == "ok")
        #expect(report.finding("fingerprint")?.verdict == "info")
        // Whether browsers could see the passkey authenticator: the kernel's UHID, as it is here.
        let passkeys = try #require(report.finding("passkeys"))
        let expected =
            access("/dev/uhid", F_OK) != 0
            ? "is missing" : access("/dev/uhid", R_OK | W_OK) != 0 ? "may not open it" : "is usable"
        #expect(passkeys.verdict == "info" && passkeys.summary.contains(expected), "\(passkeys)")
        let binding = try #require(report.finding("user binding"))
        #expect(binding.verdict == "info" && binding.summary.contains("any other user"), "\(binding)")
        let store = try #require(report.finding("store \(fixture.store)"))
        #expect(store.verdict == "warning" && store.remedy?.contains("add-recovery-key") == true, "\(store)")
        #expect(store.summary.contains("made on a simulated TPM"), "\(store)")
        #expect(store.summary.contains("layout 2") && store.summary.contains("in the TPM"), "\(store)")
        #expect(Self.snapshot(fixture.directory) == before, "doctor changed a file")

        try fixture.succeed("add-recovery-key")
        let (_, again) = try Self.doctor(fixture)
        #expect(try #require(again).finding("store \(fixture.store)")?.verdict == "ok")

        // The human form: one line per check with its verdict, the remedy under it, a verdict line.
        let (human, _) = try Self.doctor(fixture, json: false)
        #expect(human.stdout.contains("warning  tpm: "), "\(human)")
        #expect(human.stdout.hasSuffix("verdict: ready, with 3 warnings\n"), "\(human)")
    }

    @Test("A TPM in dictionary-attack lockout is a problem: doctor says not ready, what to do, and exits 69")
    func lockoutIsAProblem() throws {
        let fixture = try CLIFixture()
        try fixture.simulator.setDictionaryAttackParameters(maxTries: 1, recoveryTime: 1000, lockoutRecovery: 1000)
        let passcode = "doctor passcode 1"
        try fixture.succeed("set-passcode", "--passcode-fd", "0", stdin: Data((passcode + "\n").utf8))
        try fixture.succeed(
            "add-generic-password", "-s", "svc", "-a", "pin", "--access-control", "devicePasscode",
            "--accessible", "whenUnlockedThisDeviceOnly", "-w", "guarded")
        let wrong = try fixture.run(
            "find-generic-password", "-s", "svc", "-a", "pin", "-w", "--passcode-fd", "0",
            stdin: Data("wrong passcode\n".utf8))
        #expect(wrong.status == 77 || wrong.status == 75, "\(wrong)")

        let (result, decoded) = try Self.doctor(fixture)
        #expect(result.status == 69, "\(result)")
        let report = try #require(decoded, "\(result)")
        #expect(!report.ready && report.verdict == "not ready: 1 problem", "\(report.verdict)")
        let lockout = try #require(report.finding("lockout"))
        #expect(lockout.verdict == "problem" && lockout.summary.contains("lockout"), "\(lockout)")
        #expect(lockout.remedy?.contains("reset-lockout") == true)
    }

    @Test(
        "A store whose rollback counter is gone from its TPM is a problem that names recover and accept-rollback-risk"
    )
    func missingCounterIsAProblem() throws {
        let fixture = try CLIFixture()
        try fixture.succeed("add-generic-password", "-s", "svc", "-a", "acct", "-w", "secret")
        let location = try KeychainLocation(path: fixture.store)
        let index = try #require(location.recordedRollbackCounterIndex)
        let connection = try TPMConnection(TPMConfiguration(tcti: fixture.simulator.tcti))
        try connection.undefineNVIndex(index)
        connection.close()

        let (result, decoded) = try Self.doctor(fixture)
        #expect(result.status == 69, "\(result)")
        let report = try #require(decoded, "\(result)")
        let store = try #require(report.finding("store \(fixture.store)"))
        #expect(store.verdict == "problem" && store.summary.contains("is gone from the TPM"), "\(store)")
        #expect(store.remedy?.contains("accept-rollback-risk") == true && store.remedy?.contains("recover") == true)
        // What doctor said is what opening says.
        let opened = try fixture.run("find-generic-password", "-s", "svc", "-a", "acct", "-w")
        #expect(opened.status == 65, "\(opened)")
    }

    /// Every file under `directory` with its size, mode, modification time and contents.
    static func snapshot(_ directory: String) -> [String: String] {
        var result: [String: String] = [:]
        for path in regularFiles(under: directory) {
            var status = stat()
            guard lstat(path, &status) == 0 else { continue }
            let contents = (try? Data(contentsOf: URL(fileURLWithPath: path))) ?? Data()
            result[path] =
                "\(status.st_size) \(status.st_mode) \(status.st_mtim.tv_sec).\(status.st_mtim.tv_nsec) \(contents.base64EncodedString())"
        }
        return result
    }
}

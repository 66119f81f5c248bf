import Foundation
import TPMKeychainTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The PKCS#11 module (Sources/PKCS11Module, built by Scripts/install-pkcs11-module.sh as README
/// has it built) loaded by a real PKCS#11 consumer, GnuTLS's p11tool: the agent's keys as objects,
/// a signature that verifies, a process of another user that gets nothing, no agent at all.
@Suite("the PKCS#11 module with p11tool", .serialized)
struct PKCS11ModuleTests {
    /// The module, built once per test into the fixture's directory.
    static func build(into directory: String) throws -> String {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Scripts/install-pkcs11-module.sh").path
        let process = Process()
        process.executableURL = URL(fileURLWithPath: script)
        process.arguments = ["--output", directory]
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw AgentTestError("the module did not build") }
        return directory + "/libtpm-keychain-pkcs11.so"
    }

    static func p11tool(
        _ fixture: AgentWithOpenSSHTests.Fixture, _ module: String, _ arguments: [String], via wrapper: [String] = []
    ) throws -> (status: Int32, output: String) {
        try fixture.run(
            "/usr/bin/env",
            ["TPM_KEYCHAIN_AGENT_SOCK=" + fixture.socket, "/usr/bin/p11tool", "--provider", module] + arguments,
            via: wrapper)
    }

    @Test("the module links no Swift runtime: only the C library")
    func linksOnlyTheCLibrary() throws {
        let fixture = try AgentWithOpenSSHTests.Fixture()
        let module = try Self.build(into: fixture.directory)
        let linked = try fixture.run("/usr/bin/ldd", [module])
        #expect(linked.status == 0, "\(linked.output)")
        #expect(linked.output.contains("libc.so"))
        #expect(!linked.output.contains("swift"), "\(linked.output)")
    }

    @Test("p11tool lists each key tagged ssh as a private and a public key, and signs with it; the signature verifies")
    func listsAndSigns() throws {
        let fixture = try AgentWithOpenSSHTests.Fixture()
        let module = try Self.build(into: fixture.directory)
        let listed = try Self.p11tool(fixture, module, ["--list-all"])
        #expect(listed.status == 0, "\(listed.output)")
        #expect(listed.output.contains("Type: Private key (EC/ECDSA-SECP256R1)"), "\(listed.output)")
        #expect(listed.output.contains("Type: Public key (EC/ECDSA-SECP256R1)"), "\(listed.output)")
        #expect(listed.output.contains("Label: laptop"))
        #expect(!listed.output.contains("not-for-ssh"), "only keys tagged ssh are offered")
        #expect(listed.output.contains("CKA_NEVER_EXTRACTABLE"))

        let signed = try Self.p11tool(
            fixture, module, ["--test-sign", "pkcs11:token=TPMKeychain;object=laptop;type=private"])
        #expect(signed.status == 0, "\(signed.output)\n\(fixture.agentErrors)")
        #expect(signed.output.contains("Verifying against public key in the token... ok"), "\(signed.output)")
        #expect(fixture.agentErrors.contains("signed for /usr/bin/p11tool"), "\(fixture.agentErrors)")
        #expect(
            fixture.keyUses.contains { $0.contains(#"sign "laptop" by "/usr/bin/p11tool" (sshAgent, uid 0): "done""#) },
            "\(fixture.keyUses)")
    }

    @Test("a key that needs the passcode asks the person through the agent, naming p11tool")
    func passcodeKeyAsks() throws {
        let reason = NSTemporaryDirectory() + "pkcs11-reason-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: reason) }
        let command =
            "printf '%s' \"$TPM_KEYCHAIN_PROMPT_REASON\" > \(reason); printf '%s' '\(AgentWithOpenSSHTests.Fixture.passcode)'"
        let fixture = try AgentWithOpenSSHTests.Fixture(
            guardedKey: true, agentArguments: ["--passcode-command", command])
        let module = try Self.build(into: fixture.directory)
        let signed = try Self.p11tool(
            fixture, module, ["--test-sign", "pkcs11:token=TPMKeychain;object=guarded;type=private"])
        #expect(signed.status == 0, "\(signed.output)\n\(fixture.agentErrors)")
        let asked = (try? String(contentsOfFile: reason, encoding: .utf8)) ?? ""
        #expect(asked.contains("\"guarded\"") && asked.contains("/usr/bin/p11tool"), "\(asked)")
    }

    @Test("without an agent the token is there and empty: no crash, no object")
    func noAgent() throws {
        let fixture = try AgentWithOpenSSHTests.Fixture()
        let module = try Self.build(into: fixture.directory)
        kill(fixture.agent.processIdentifier, SIGTERM)
        fixture.agent.waitUntilExit()
        let listed = try Self.p11tool(fixture, module, ["--list-all"])
        #expect(!listed.output.contains("Private key"), "\(listed.output)")
        #expect(listed.status == 0 || listed.output.contains("No matching objects"), "\(listed.output)")
        let tokens = try Self.p11tool(fixture, module, ["--list-tokens"])
        #expect(tokens.output.contains("Label: TPMKeychain"), "\(tokens.output)")
    }

    @Test(
        "a process of another user that loads the module gets no key",
        .enabled(if: geteuid() == 0, "needs root: the test creates its user with useradd"))
    func anotherUserGetsNothing() throws {
        let fixture = try AgentWithOpenSSHTests.Fixture()
        let module = try Self.build(into: fixture.directory)
        let user = "tkp11" + String(UInt32.random(in: 0...UInt32.max), radix: 36)
        try SystemTool.run("/usr/sbin/useradd", ["-M", "-N", "-s", "/usr/sbin/nologin", user])
        defer { try? SystemTool.run("/usr/sbin/userdel", [user]) }
        // The module and the socket reachable, as a careless setup would leave them: the agent refuses.
        #expect(chmod(fixture.directory, 0o755) == 0 && chmod(fixture.socket, 0o777) == 0)
        let listed = try Self.p11tool(fixture, module, ["--list-all"], via: ["/usr/sbin/runuser", "-u", user, "--"])
        #expect(!listed.output.contains("Label: laptop"), "\(listed.output)")
        #expect(fixture.agentErrors.contains("this agent serves uid 0 only"), "\(fixture.agentErrors)")
    }
}

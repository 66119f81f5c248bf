import Foundation
import TPMKeychainTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The PKCS#11 module with the consumers people load it into: OpenSC's pkcs11-tool, a TLS client
/// (GnuTLS's gnutls-cli) presenting the keychain's identity to `openssl s_server -Verify 1`, NSS
/// (modutil, certutil); and a C program (Fixtures/pkcs11/pkcs11-client.c) that signs from
/// several threads at once and finalizes the module in the middle of a signature.
@Suite("the PKCS#11 module with real consumers", .serialized)
struct PKCS11ClientsTests {
    typealias Fixture = AgentWithOpenSSHTests.Fixture

    /// The fixture's store with a certificate for its key "laptop", issued by a CA made here:
    /// the module's identity. Returns the CA's certificate.
    static func issueCertificate(in fixture: Fixture) throws -> String {
        let directory = fixture.directory
        let publicKey = directory + "/laptop.public.pem"
        let exported = try fixture.run(
            Fixture.tool("tpm-keychain-keys"), ["public", "--keychain", fixture.store, "--label", "laptop"])
        try Fixture.expectSuccess(exported)
        try exported.output.write(toFile: publicKey, atomically: true, encoding: .utf8)
        let openssl = "/usr/bin/openssl"
        try Fixture.expectSuccess(
            try fixture.run(
                openssl,
                [
                    "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
                    directory + "/ca.key", "-out", directory + "/ca.pem", "-subj", "/CN=Test CA", "-days", "2",
                ]))
        // A request signed by a throwaway key whose public key the CA replaces with the TPM key's.
        try Fixture.expectSuccess(
            try fixture.run(
                openssl,
                [
                    "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
                    directory + "/throwaway.key", "-out", directory + "/laptop.csr", "-subj", "/CN=laptop",
                ]))
        try Fixture.expectSuccess(
            try fixture.run(
                openssl,
                [
                    "x509", "-req", "-in", directory + "/laptop.csr", "-force_pubkey", publicKey, "-CA",
                    directory + "/ca.pem", "-CAkey", directory + "/ca.key", "-CAcreateserial", "-out",
                    directory + "/laptop.pem", "-days", "2",
                ]))
        // A certificate of another key is refused: it would pair the identity with the wrong key.
        let wrong = try fixture.run(
            Fixture.tool("tpm-keychain-keys"),
            [
                "add-certificate", "--keychain", fixture.store, "--label", "laptop", "--certificate",
                directory + "/ca.pem",
            ])
        #expect(wrong.status == 65 && wrong.output.contains("not for the key \"laptop\""), "\(wrong.output)")
        let added = try fixture.run(
            Fixture.tool("tpm-keychain-keys"),
            [
                "add-certificate", "--keychain", fixture.store, "--label", "laptop", "--certificate",
                directory + "/laptop.pem",
            ])
        #expect(added.status == 0 && added.output.contains("stored for key \"laptop\""), "\(added.output)")
        return directory + "/ca.pem"
    }

    /// Runs `tool` with the module's agent socket in its environment.
    static func run(_ fixture: Fixture, _ tool: String, _ arguments: [String]) throws -> (status: Int32, output: String)
    {
        try fixture.run("/usr/bin/env", ["TPM_KEYCHAIN_AGENT_SOCK=" + fixture.socket, tool] + arguments)
    }

    @Test("pkcs11-tool lists the key pair and its certificate, signs (openssl verifies it), and its self-test passes")
    func pkcs11Tool() throws {
        let fixture = try Fixture()
        let module = try PKCS11ModuleTests.build(into: fixture.directory)
        _ = try Self.issueCertificate(in: fixture)
        let listed = try Self.run(fixture, "/usr/bin/pkcs11-tool", ["--module", module, "--list-objects"])
        #expect(listed.status == 0, "\(listed.output)")
        for object in ["Private Key Object; EC", "Public Key Object; EC", "Certificate Object; type = X.509 cert"] {
            #expect(listed.output.contains(object), "\(listed.output)")
        }
        #expect(listed.output.contains("subject:    DN: CN=laptop"), "\(listed.output)")
        #expect(listed.output.contains("never extractable"), "\(listed.output)")
        #expect(!listed.output.contains("not-for-ssh"), "only keys tagged ssh are offered")

        let message = fixture.directory + "/message"
        try "a message for pkcs11-tool\n".write(toFile: message, atomically: true, encoding: .utf8)
        let signed = try Self.run(
            fixture, "/usr/bin/pkcs11-tool",
            [
                "--module", module, "--sign", "--mechanism", "ECDSA-SHA256", "--label", "laptop", "--signature-format",
                "openssl", "-i", message, "-o", message + ".sig",
            ])
        #expect(signed.status == 0, "\(signed.output)\n\(fixture.agentErrors)")
        let verified = try fixture.run(
            "/usr/bin/openssl",
            [
                "dgst", "-sha256", "-verify", fixture.directory + "/laptop.public.pem", "-signature", message + ".sig",
                message,
            ])
        #expect(verified.status == 0 && verified.output.contains("Verified OK"), "\(verified.output)")

        let tested = try Self.run(fixture, "/usr/bin/pkcs11-tool", ["--module", module, "--test"])
        #expect(tested.status == 0 && tested.output.contains("No errors"), "\(tested.output)")
    }

    @Test("gnutls-cli presents the keychain's identity by pkcs11: URI to openssl s_server -Verify 1; p11tool lists it")
    func mutualTLS() throws {
        let fixture = try Fixture()
        let module = try PKCS11ModuleTests.build(into: fixture.directory)
        let authority = try Self.issueCertificate(in: fixture)
        let listed = try Self.run(fixture, "/usr/bin/p11tool", ["--provider", module, "--list-all"])
        #expect(listed.output.contains("Type: X.509 Certificate (EC/ECDSA-SECP256R1)"), "\(listed.output)")
        #expect(listed.output.contains("object=laptop;type=cert"), "\(listed.output)")

        let server = try TestTLSServer(in: fixture.directory, trusting: authority)
        let client = try Self.run(
            fixture, "/usr/bin/gnutls-cli",
            [
                "--provider", module, "--x509cafile", server.certificate, "--x509certfile",
                "pkcs11:token=TPMKeychain;object=laptop;type=cert", "--x509keyfile",
                "pkcs11:token=TPMKeychain;object=laptop;type=private", "--logfile", fixture.directory + "/gnutls.log",
                "-p", String(server.port), "localhost",
            ])
        #expect(client.status == 0, "\(client.output)\n\(server.output)\n\(fixture.agentErrors)")
        let answered = server.waitForEnd()
        #expect(answered.contains("depth=0 CN = laptop") && answered.contains("Verification: OK"), "\(answered)")
        #expect(answered.contains("Peer certificate: CN = laptop"), "\(answered)")
        #expect(fixture.agentErrors.contains("signed for /usr/bin/gnutls-cli"), "\(fixture.agentErrors)")
    }

    @Test("NSS loads the module (modutil -add) and lists the identity (certutil -L -h all) and its key")
    func nss() throws {
        let fixture = try Fixture()
        let module = try PKCS11ModuleTests.build(into: fixture.directory)
        _ = try Self.issueCertificate(in: fixture)
        let database = "sql:" + fixture.directory + "/nss"
        try FileManager.default.createDirectory(atPath: fixture.directory + "/nss", withIntermediateDirectories: false)
        try Fixture.expectSuccess(try fixture.run("/usr/bin/certutil", ["-N", "-d", database, "--empty-password"]))
        let added = try fixture.run(
            "/usr/bin/modutil", ["-dbdir", database, "-add", "TPMKeychain", "-libfile", module, "-force"])
        #expect(added.status == 0, "\(added.output)")
        let modules = try Self.run(fixture, "/usr/bin/modutil", ["-dbdir", database, "-list"])
        #expect(modules.output.contains("token: TPMKeychain"), "\(modules.output)")
        let certificates = try Self.run(fixture, "/usr/bin/certutil", ["-L", "-h", "all", "-d", database])
        #expect(certificates.status == 0, "\(certificates.output)")
        #expect(
            certificates.output.split(separator: "\n").contains {
                $0.hasPrefix("TPMKeychain:laptop") && $0.hasSuffix("u,u,u")
            },
            "\(certificates.output)")
        let keys = try Self.run(fixture, "/usr/bin/certutil", ["-K", "-h", "TPMKeychain", "-d", database])
        #expect(keys.output.contains("ec ") && keys.output.contains("laptop"), "\(keys.output)")
    }

    @Test("a token per store: with two agents the module shows two tokens, each with its own store's keys")
    func aTokenPerStore() throws {
        let fixture = try Fixture()
        let module = try PKCS11ModuleTests.build(into: fixture.directory)
        // A second store, "work", with a key of its own, served by a second agent.
        let work = fixture.directory + "/work"
        try Fixture.expectSuccess(try fixture.run(Fixture.tool("tpm-keychain"), ["create-keychain", work]))
        try Fixture.expectSuccess(
            try fixture.run(
                Fixture.tool("tpm-keychain-keys"), ["create", "--keychain", work, "--label", "deploy", "--tag", "ssh"]))
        let workSocket = fixture.directory + "/work.socket"
        let output = fixture.directory + "/work-agent.out"
        _ = FileManager.default.createFile(atPath: output, contents: nil)
        let agent = Process()
        agent.executableURL = URL(fileURLWithPath: Fixture.tool("tpm-keychain-ssh-agent"))
        agent.arguments = ["--keychain", work, "-a", workSocket]
        agent.environment = fixture.environment
        agent.standardOutput = FileHandle(forWritingAtPath: output)
        agent.standardError = FileHandle.nullDevice
        try agent.run()
        defer {
            kill(agent.processIdentifier, SIGTERM)
            agent.waitUntilExit()
        }
        let deadline = ContinuousClock.now + .seconds(120)
        while !TestSSHD.contents(of: output).contains("SSH_AUTH_SOCK="), agent.isRunning, ContinuousClock.now < deadline
        {
            usleep(20_000)
        }

        func p11tool(_ arguments: [String]) throws -> (status: Int32, output: String) {
            try fixture.run(
                "/usr/bin/env",
                [
                    "TPM_KEYCHAIN_AGENT_SOCK=\(fixture.socket):\(workSocket)", "/usr/bin/p11tool", "--provider", module,
                ] + arguments)
        }
        let tokens = try p11tool(["--list-tokens"])
        #expect(tokens.output.contains("Label: TPMKeychain\n"), "the default store's token: \(tokens.output)")
        #expect(tokens.output.contains("Label: TPMKeychain work\n"), "\(tokens.output)")
        let workKeys = try p11tool(["--list-all", "pkcs11:token=TPMKeychain%20work"])
        #expect(workKeys.output.contains("Label: deploy") && !workKeys.output.contains("Label: laptop"), "\(workKeys)")
        let defaultKeys = try p11tool(["--list-all", "pkcs11:token=TPMKeychain"])
        #expect(defaultKeys.output.contains("Label: laptop") && !defaultKeys.output.contains("Label: deploy"))
        let signed = try p11tool(["--test-sign", "pkcs11:token=TPMKeychain%20work;object=deploy;type=private"])
        #expect(signed.output.contains("Verifying against public key in the token... ok"), "\(signed.output)")
    }

    /// Fixtures/pkcs11/pkcs11-client.c, compiled into the fixture's directory.
    static func client(in fixture: Fixture) throws -> String {
        let source = ProjectFixtures.directory.appendingPathComponent("pkcs11/pkcs11-client.c").path
        let output = fixture.directory + "/pkcs11-client"
        try Fixture.expectSuccess(
            try fixture.run("/usr/bin/cc", ["-O2", source, "-o", output, "-lcrypto", "-lpthread", "-ldl"]))
        return output
    }

    @Test("eight threads sign at once, each in its own session: every signature verifies")
    func severalThreads() throws {
        let fixture = try Fixture()
        let module = try PKCS11ModuleTests.build(into: fixture.directory)
        let client = try Self.client(in: fixture)
        let result = try Self.run(fixture, client, [module, "threads", "laptop", "8", "10"])
        #expect(result.status == 0, "\(result.output)\n\(fixture.agentErrors)")
        #expect(result.output.contains("verified 80 of 80 signatures from 8 threads"), "\(result.output)")
    }

    @Test(
        "a handle keeps naming its key: after another session's search sees a key deleted before it and one added, it signs with its own key"
    )
    func handlesStayWithTheirKeys() throws {
        let fixture = try Fixture()
        let module = try PKCS11ModuleTests.build(into: fixture.directory)
        let client = try Self.client(in: fixture)
        // "second" comes after the fixture's "laptop": its handles follow laptop's.
        let keys = Fixture.tool("tpm-keychain-keys")
        try Fixture.expectSuccess(
            try fixture.run(keys, ["create", "--keychain", fixture.store, "--label", "second", "--tag", "ssh"]))
        // Between the searches: the key before it goes, and a new one comes after it.
        let change = [
            "\(keys) delete --keychain \(fixture.store) --label laptop",
            "\(keys) create --keychain \(fixture.store) --label third --tag ssh",
        ].joined(separator: " && ")
        let result = try Self.run(fixture, client, [module, "stable", "second", change])
        #expect(result.status == 0, "\(result.output)\n\(fixture.agentErrors)")
        #expect(
            result.output.contains("the handle found before the change still signs as \"second\""), "\(result.output)")
    }

    @Test("C_Finalize while another thread is in C_Sign: no crash, and the module starts and signs again")
    func finalizeDuringSign() throws {
        let fixture = try Fixture()
        let module = try PKCS11ModuleTests.build(into: fixture.directory)
        let client = try Self.client(in: fixture)
        let result = try Self.run(fixture, client, [module, "finalize", "laptop"])
        #expect(result.status == 0, "\(result.output)\n\(fixture.agentErrors)")
        #expect(result.output.contains("finalized during signature"), "\(result.output)")
        #expect(fixture.agent.isRunning)
    }
}

/// `openssl s_server` requiring a client certificate from `authority` (-Verify 1), for one
/// connection on a free loopback port; it reverses what the client sends (-rev) and ends.
final class TestTLSServer {
    let port: Int
    let certificate: String
    let process: Process
    private let outputPath: String

    var output: String { (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? "" }

    init(in directory: String, trusting authority: String) throws {
        let key = directory + "/server.key"
        certificate = directory + "/server.pem"
        try SystemTool.run(
            "/usr/bin/openssl",
            [
                "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key,
                "-out", certificate, "-subj", "/CN=localhost", "-days", "2",
            ])
        let outputPath = directory + "/s_server.out"
        self.outputPath = outputPath
        var output: String { TestSSHD.contents(of: outputPath) }
        var started: (Int, Process)?
        for _ in 0..<5 where started == nil {
            let port = try TestSSHD.freePort()
            _ = FileManager.default.createFile(atPath: outputPath, contents: nil)
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
            process.arguments = [
                "s_server", "-accept", "127.0.0.1:\(port)", "-cert", certificate, "-key", key, "-CAfile", authority,
                "-Verify", "1", "-verify_return_error", "-naccept", "1", "-rev",
            ]
            let handle = FileHandle(forWritingAtPath: outputPath)
            process.standardOutput = handle
            process.standardError = handle
            process.standardInput = FileHandle.nullDevice
            try process.run()
            let deadline = ContinuousClock.now + .seconds(60)
            while process.isRunning, !output.contains("ACCEPT"), ContinuousClock.now < deadline { usleep(10_000) }
            if process.isRunning, output.contains("ACCEPT") { started = (port, process) }
        }
        guard let started else { throw AgentTestError("openssl s_server did not start: \(output)") }
        (port, process) = started
    }

    /// The server's output once it has served its one connection.
    func waitForEnd() -> String {
        let deadline = ContinuousClock.now + .seconds(60)
        while process.isRunning, ContinuousClock.now < deadline { usleep(10_000) }
        return output
    }

    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGTERM)
            process.waitUntilExit()
        }
    }
}

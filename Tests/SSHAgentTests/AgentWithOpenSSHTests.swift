import Foundation
import SSHAgent
import SystemCalls
import TPMKeychainTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The agent binary over a store on a private swtpm, with OpenSSH's own clients: ssh-add lists
/// the keys tagged ssh, ssh-keygen -Y signs through the agent and verifies the signature. Then
/// what a hostile client does: another user, a malformed message, a client that hangs up.
@Suite("the ssh agent with OpenSSH's clients", .serialized)
struct AgentWithOpenSSHTests {
    /// A store with two TPM keys (one tagged ssh), the agent serving it, and their clean-up.
    final class Fixture {
        let simulator: SoftwareTPM
        let directory: String
        let socket: String
        let agent: Process
        let agentOutput: String
        /// Between the agent and the simulator when asked for: it counts the agent's TPM commands.
        let proxy: RecordingTPMProxy?
        /// Named `default`, as the default store is: its PKCS#11 token is "TPMKeychain".
        var store: String { directory + "/default" }

        static let passcode = "4711-correct-horse"

        /// - Parameters:
        ///   - guardedKey: also set a device passcode and make a key tagged ssh that needs it ("guarded").
        ///   - agentArguments: given to the agent after its store and socket.
        init(
            recordingTheAgentsTPMCommands: Bool = false, guardedKey: Bool = false, agentArguments: [String] = []
        ) throws {
            simulator = try SoftwareTPM.start()
            proxy = recordingTheAgentsTPMCommands ? try RecordingTPMProxy.start(forwardingTo: simulator.port) : nil
            directory = NSTemporaryDirectory() + "tpm-keychain-ssh-agent-" + UUID().uuidString
            try FileManager.default.createDirectory(
                atPath: directory, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
            socket = directory + "/agent.socket"
            agentOutput = directory + "/agent.out"
            agent = Process()
            try Self.expectSuccess(try run(Self.tool("tpm-keychain"), ["create-keychain", store]))
            if guardedKey {
                try Self.expectSuccess(
                    try run(
                        Self.tool("tpm-keychain"), ["set-passcode", "--keychain", store, "--passcode-fd", "0"],
                        stdin: Self.passcode + "\n"))
                try Self.expectSuccess(
                    try run(
                        Self.tool("tpm-keychain-keys"),
                        [
                            "create", "--keychain", store, "--label", "guarded", "--tag", "ssh", "--access-control",
                            "devicePasscode",
                        ]))
            }
            try Self.expectSuccess(
                try run(
                    Self.tool("tpm-keychain-keys"),
                    ["create", "--keychain", store, "--label", "laptop", "--tag", "ssh"]))
            try Self.expectSuccess(
                try run(Self.tool("tpm-keychain-keys"), ["create", "--keychain", store, "--label", "not-for-ssh"]))
            _ = FileManager.default.createFile(atPath: agentOutput, contents: nil)
            _ = FileManager.default.createFile(atPath: directory + "/agent.err", contents: nil)
            agent.executableURL = URL(fileURLWithPath: Self.tool("tpm-keychain-ssh-agent"))
            agent.arguments = ["--keychain", store, "-a", socket] + agentArguments
            var agentEnvironment = environment
            if let proxy { agentEnvironment["TPM_KEYCHAIN_TCTI"] = proxy.tcti }
            agent.environment = agentEnvironment
            agent.standardOutput = FileHandle(forWritingAtPath: agentOutput)
            agent.standardError = FileHandle(forWritingAtPath: directory + "/agent.err")
            try agent.run()
            // Ready once it has printed where it listens (it listens before it prints).
            let deadline = ContinuousClock.now + .seconds(120)
            while !((try? String(contentsOfFile: agentOutput, encoding: .utf8)) ?? "").contains("SSH_AUTH_SOCK=") {
                guard agent.isRunning, ContinuousClock.now < deadline else {
                    throw AgentTestError("the agent did not start: \(agentErrors)")
                }
                usleep(20_000)
            }
        }

        var environment: [String: String] {
            var environment = ProcessInfo.processInfo.environment
            environment["TPM_KEYCHAIN_TCTI"] = simulator.tcti
            environment["SSH_AUTH_SOCK"] = socket
            // The device (passcode, lock state) and any default store stay inside the fixture.
            environment["XDG_STATE_HOME"] = directory + "/xdg-state"
            environment["XDG_DATA_HOME"] = directory + "/xdg-data"
            return environment
        }

        var agentErrors: String { (try? String(contentsOfFile: directory + "/agent.err", encoding: .utf8)) ?? "" }

        /// The owner's record of key uses (KeyUseLog), in the fixture's state directory.
        var keyUses: [Substring] {
            ((try? String(contentsOfFile: directory + "/xdg-state/tpm-keychain/key-uses.log", encoding: .utf8)) ?? "")
                .split(separator: "\n")
        }

        /// Runs `executable` to its end with the fixture's environment; its status and output.
        func run(
            _ executable: String, _ arguments: [String], stdin: String? = nil, via wrapper: [String] = []
        ) throws -> (status: Int32, output: String) {
            let process = Process()
            let output = directory + "/run-\(UUID().uuidString).out"
            _ = FileManager.default.createFile(atPath: output, contents: nil)
            defer { try? FileManager.default.removeItem(atPath: output) }
            if wrapper.isEmpty {
                process.executableURL = URL(fileURLWithPath: executable)
                process.arguments = arguments
            } else {
                process.executableURL = URL(fileURLWithPath: wrapper[0])
                process.arguments = Array(wrapper.dropFirst()) + [executable] + arguments
            }
            process.environment = environment
            let handle = FileHandle(forWritingAtPath: output)
            process.standardOutput = handle
            process.standardError = handle
            let input = Pipe()
            process.standardInput = stdin == nil ? FileHandle.nullDevice : input
            try process.run()
            if let stdin {
                input.fileHandleForWriting.write(Data(stdin.utf8))
                try input.fileHandleForWriting.close()
            }
            process.waitUntilExit()
            return (process.terminationStatus, (try? String(contentsOfFile: output, encoding: .utf8)) ?? "")
        }

        static func expectSuccess(_ result: (status: Int32, output: String)) throws {
            guard result.status == 0 else { throw AgentTestError("exit \(result.status): \(result.output)") }
        }

        static func tool(_ name: String) -> String {
            if name.hasPrefix("/") { return name }
            let bundle =
                (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
                ?? CommandLine.arguments[0]
            return URL(fileURLWithPath: bundle).deletingLastPathComponent().appendingPathComponent(name).path
        }

        deinit {
            if agent.isRunning {
                kill(agent.processIdentifier, SIGTERM)
                agent.waitUntilExit()
            }
            proxy?.stop()
            simulator.stop()
            try? FileManager.default.removeItem(atPath: directory)
        }
    }

    @Test(
        "ssh-add lists only the key tagged ssh, and ssh-keygen signs with it through the agent; the signature verifies")
    func listsAndSignsForOpenSSH() throws {
        let fixture = try Fixture()
        let listed = try fixture.run("/usr/bin/ssh-add", ["-L"])
        #expect(listed.status == 0, "\(listed.output)")
        let lines = listed.output.split(separator: "\n")
        #expect(lines.count == 1, "\(listed.output)")
        let line = try #require(lines.first)
        #expect(line.hasPrefix("ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTY") && line.hasSuffix(" laptop"))

        let publicKey = fixture.directory + "/laptop.pub"
        let message = fixture.directory + "/message"
        try (line + "\n").write(toFile: publicKey, atomically: true, encoding: .utf8)
        try "deploy main to production\n".write(toFile: message, atomically: true, encoding: .utf8)
        let signed = try fixture.run("/usr/bin/ssh-keygen", ["-Y", "sign", "-f", publicKey, "-n", "file", message])
        #expect(signed.status == 0, "\(signed.output)\n\(fixture.agentErrors)")
        let allowed = fixture.directory + "/allowed_signers"
        try ("laptop " + line.split(separator: " ").prefix(2).joined(separator: " ") + "\n").write(
            toFile: allowed, atomically: true, encoding: .utf8)
        let verified = try fixture.run(
            "/usr/bin/ssh-keygen",
            ["-Y", "verify", "-f", allowed, "-I", "laptop", "-n", "file", "-s", message + ".sig"],
            stdin: "deploy main to production\n")
        #expect(verified.status == 0, "\(verified.output)")
        let forged = try fixture.run(
            "/usr/bin/ssh-keygen",
            ["-Y", "verify", "-f", allowed, "-I", "laptop", "-n", "file", "-s", message + ".sig"],
            stdin: "deploy a fork to production\n")
        #expect(forged.status != 0, "a signature of another message must not verify")
        #expect(fixture.agentErrors.contains("signed for /usr/bin/ssh-keygen"), "\(fixture.agentErrors)")
    }

    /// Signs `message` with the key `label` through the agent: ssh-keygen's status and output.
    static func sign(_ label: String, in fixture: Fixture) throws -> (status: Int32, output: String) {
        let listed = try fixture.run("/usr/bin/ssh-add", ["-L"]).output.split(separator: "\n")
        let line = try #require(listed.first { $0.hasSuffix(" " + label) }, "\(listed)")
        let publicKey = fixture.directory + "/\(label).pub"
        let message = fixture.directory + "/message-\(UUID().uuidString)"
        try (line + "\n").write(toFile: publicKey, atomically: true, encoding: .utf8)
        try "a message\n".write(toFile: message, atomically: true, encoding: .utf8)
        return try fixture.run("/usr/bin/ssh-keygen", ["-Y", "sign", "-f", publicKey, "-n", "file", message])
    }

    @Test(
        "a grant that denies ssh-keygen the key laptop stops its signatures through the agent (the key is still listed); revoked, it signs again; the audit trail has both"
    )
    func denyGrantStopsSignatures() throws {
        let fixture = try Fixture()
        let audit = try fixture.run(Fixture.tool("tpm-keychain"), ["audit", "enable", "--keychain", fixture.store])
        #expect(audit.status == 0, "\(audit.output)")
        let added = try fixture.run(
            Fixture.tool("tpm-keychain"),
            [
                "grants", "add", "--keychain", fixture.store, "--deny", "--program", "/usr/bin/ssh-keygen", "--key",
                "laptop",
            ])
        #expect(added.status == 0, "\(added.output)")
        let id = added.output.trimmingCharacters(in: .whitespacesAndNewlines)
        let refused = try Self.sign("laptop", in: fixture)
        #expect(refused.status != 0, "\(refused.output)")
        #expect(fixture.agentErrors.contains("A grant of this keychain denies executable"), "\(fixture.agentErrors)")
        // Another program (ssh-add) is not named by the grant, and lists are not governed.
        #expect(try fixture.run("/usr/bin/ssh-add", ["-L"]).output.hasSuffix(" laptop\n"))
        let revoked = try fixture.run(
            Fixture.tool("tpm-keychain"), ["grants", "revoke", "--keychain", fixture.store, id])
        #expect(revoked.status == 0, "\(revoked.output)")
        let signed = try Self.sign("laptop", in: fixture)
        #expect(signed.status == 0, "\(signed.output)\n\(fixture.agentErrors)")
        // The trail has both, with the program the kernel named.
        let trail = try fixture.run(Fixture.tool("tpm-keychain"), ["audit", "show", "--keychain", fixture.store])
        let lines = trail.output.split(separator: "\n")
        #expect(
            lines.contains {
                $0.contains("sshAgent read-secret refused (denied by grant \(id))")
                    && $0.contains("exe=\"/usr/bin/ssh-keygen\"") && $0.contains("item=\"laptop\"")
            }, "\(trail.output)")
        #expect(lines.contains { $0.contains("sshAgent read-secret allowed ") }, "\(trail.output)")
        #expect(lines.last?.hasPrefix("intact: ") == true, "\(trail.output)")
    }

    @Test("a key that needs the passcode asks for it, naming the key and the program; a wrong passcode signs nothing")
    func passcodeKeyAsksThePerson() throws {
        let reason = NSTemporaryDirectory() + "ssh-agent-reason-" + UUID().uuidString
        let answer = reason + ".answer"
        defer { try? FileManager.default.removeItem(atPath: reason) }
        defer { try? FileManager.default.removeItem(atPath: answer) }
        try Fixture.passcode.write(toFile: answer, atomically: true, encoding: .utf8)
        let command = "printf '%s' \"$TPM_KEYCHAIN_PROMPT_REASON\" > \(reason); cat \(answer)"
        let fixture = try Fixture(guardedKey: true, agentArguments: ["--passcode-command", command])
        #expect(try fixture.run("/usr/bin/ssh-add", ["-L"]).output.split(separator: "\n").count == 2)
        let signed = try Self.sign("guarded", in: fixture)
        #expect(signed.status == 0, "\(signed.output)\n\(fixture.agentErrors)")
        let asked = (try? String(contentsOfFile: reason, encoding: .utf8)) ?? ""
        #expect(asked.contains("\"guarded\"") && asked.contains("/usr/bin/ssh-keygen"), "\(asked)")

        try "not-the-passcode".write(toFile: answer, atomically: true, encoding: .utf8)
        let refused = try Self.sign("guarded", in: fixture)
        #expect(refused.status != 0, "\(refused.output)")
        #expect(fixture.agentErrors.contains("refused a signature"), "\(fixture.agentErrors)")
        // The key under the master key needs nobody.
        #expect(try Self.sign("laptop", in: fixture).status == 0)
        // Each use on the owner's record: who, which key, what came of it.
        let uses = fixture.keyUses
        #expect(uses.count == 3, "\(uses)")
        #expect(
            uses.first?.contains(#"sign "guarded" by "/usr/bin/ssh-keygen" (sshAgent, uid 0): "done""#) == true,
            "\(uses)")
        #expect(
            uses.dropFirst().first?.contains(#"open "guarded" by "/usr/bin/ssh-keygen" (sshAgent, uid 0): "refused"#)
                == true, "\(uses)")
        #expect(uses.last?.contains(#"sign "laptop" by "/usr/bin/ssh-keygen""#) == true, "\(uses)")
    }

    @Test("an agent with nobody to ask refuses a key that needs the passcode, and says how to start it")
    func passcodeKeyWithoutAPrompt() throws {
        let fixture = try Fixture(guardedKey: true)
        let refused = try Self.sign("guarded", in: fixture)
        #expect(refused.status != 0, "\(refused.output)")
        #expect(fixture.agentErrors.contains("--passcode-command"), "\(fixture.agentErrors)")
    }

    @Test(
        "once the store is open, a listing asks the TPM nothing, and a signature only what the key's own use needs"
    )
    func listingAsksNoTPM() throws {
        let fixture = try Fixture(recordingTheAgentsTPMCommands: true)
        let proxy = try #require(fixture.proxy)
        let first = try fixture.run("/usr/bin/ssh-add", ["-L"])
        #expect(first.status == 0, "\(first.output)")
        #expect(proxy.commandCount > 0, "opening the store unseals its master key through the proxy")
        proxy.reset()
        for _ in 0..<3 {
            #expect(try fixture.run("/usr/bin/ssh-add", ["-L"]).output == first.output)
        }
        #expect(proxy.commandCount == 0, "TPM commands of a listing: \(proxy.commandCodes)")
        // The first signature finds the device's directory (the storage key's name), once.
        #expect(try Self.sign("laptop", in: fixture).status == 0)
        proxy.reset()
        #expect(try Self.sign("laptop", in: fixture).status == 0)
        let names = proxy.commandCodes.map(RecordingTPMProxy.commandName)
        // A signature costs what the library's own costs (KeyBenchmarks): no command for the agent.
        #expect(
            names == [
                "ContextLoad", "Load", "StartAuthSession", "Sign", "FlushContext", "FlushContext", "FlushContext",
            ], "\(names)")
    }

    @Test(
        "a connection bound to a host (session-bind@openssh.com) names it in the log; a second binding is refused unless forwarded"
    )
    func sessionBindingNamesTheHost() throws {
        let fixture = try Fixture()
        let client = try AgentClient(fixture.socket)
        func bind(_ fields: [UInt8]) throws -> [UInt8] {
            var request = SSHWireWriter()
            request.byte(27)
            request.string(AgentServer.sessionBind)
            request.raw(fields)
            return try client.ask(request.bytes)
        }
        let (fields, _) = try SessionBindingTests.ed25519Binding()
        let binding = try #require(SessionBinding(fields: fields))
        #expect(try bind(fields) == [6])
        #expect(try bind(try SessionBindingTests.ed25519Binding().fields) == [5], "one session per connection")
        // A signature on the bound connection: the log says where it goes.
        let identities = try client.ask([11])
        var reader = SSHWireReader(Array(identities.dropFirst()))
        _ = try reader.uint32()
        let blob = try reader.string()
        var sign = SSHWireWriter()
        sign.byte(13)
        sign.string(blob)
        sign.string(binding.sessionIdentifier)
        sign.uint32(0)
        #expect(try client.ask(sign.bytes).first == 14)
        #expect(fixture.agentErrors.contains("to host key \(binding.hostKeyFingerprint)"), "\(fixture.agentErrors)")
        #expect(try bind(try SessionBindingTests.ed25519Binding(forwarding: true).fields) == [6], "a forwarding hop")
    }

    @Test("a key handed in with ssh-add is refused: keys are made in the TPM")
    func addingAKeyIsRefused() throws {
        let fixture = try Fixture()
        let key = fixture.directory + "/software-key"
        try Fixture.expectSuccess(try fixture.run("/usr/bin/ssh-keygen", ["-q", "-t", "ecdsa", "-N", "", "-f", key]))
        let added = try fixture.run("/usr/bin/ssh-add", [key])
        #expect(added.status != 0, "\(added.output)")
        #expect(fixture.agentErrors.contains("keys are made in the TPM"), "\(fixture.agentErrors)")
        #expect(try fixture.run("/usr/bin/ssh-add", ["-L"]).output.split(separator: "\n").count == 1)
    }

    @Test("locked with a passphrase the agent lists nothing and signs nothing; a wrong passphrase does not unlock it")
    func lockAndUnlock() throws {
        let fixture = try Fixture()
        let client = try AgentClient(fixture.socket)
        let identities = try client.ask([11])
        #expect(identities.first == 12 && identities[1...4] == [0, 0, 0, 1])
        #expect(try client.ask(Self.message(22, "correct horse")) == [6])
        #expect(try client.ask([11]) == [12, 0, 0, 0, 0])
        #expect(try client.ask(Self.message(23, "wrong")) == [5])
        #expect(try client.ask([11]) == [12, 0, 0, 0, 0])
        #expect(try client.ask(Self.message(23, "correct horse")) == [6])
        #expect(try client.ask([11]) == identities)
    }

    @Test("a malformed message closes that connection only; a client that hangs up mid-message harms no one")
    func malformedAndHungUpClients() throws {
        let fixture = try Fixture()
        let oversized = try AgentClient(fixture.socket)
        try oversized.send([0x7F, 0xFF, 0xFF, 0xFF, 11])
        #expect(try oversized.receive() == nil, "a length past 256 KiB closes the connection")
        let garbage = try AgentClient(fixture.socket)
        #expect(try garbage.askRaw([0, 0, 0, 6, 13, 0xFF, 0xFF, 0xFF, 0xFF, 1]) == nil, "a string past its message")
        let halfway = try AgentClient(fixture.socket)
        try halfway.send([0, 0, 0, 100, 13, 0, 0])
        halfway.close()
        let unknown = try AgentClient(fixture.socket)
        #expect(try unknown.ask([1]) == [5], "an unknown type is answered with failure")
        #expect(try unknown.ask([27, 0, 0, 0, 5] + Array("query".utf8)) == [28])
        // The digest extension with fields that do not parse, or a digest that is not 32 bytes.
        var digestRequest = SSHWireWriter()
        digestRequest.byte(27)
        digestRequest.string(AgentServer.signDigest)
        digestRequest.string([1, 2, 3])
        #expect(try unknown.ask(digestRequest.bytes) == [5])
        digestRequest.string([UInt8](repeating: 7, count: 31))
        #expect(try unknown.ask(digestRequest.bytes) == [5])
        #expect(try unknown.ask([11]).first == 12, "the same connection goes on")
        #expect(fixture.agent.isRunning)
    }

    @Test(
        "another user is refused by the agent itself, even where the socket's permissions would let them connect",
        .enabled(if: geteuid() == 0, "needs root: the test creates its user with useradd"))
    func anotherUserIsRefused() throws {
        let fixture = try Fixture()
        let user = "tkssh" + String(UInt32.random(in: 0...UInt32.max), radix: 36)
        try SystemTool.run("/usr/sbin/useradd", ["-M", "-N", "-s", "/usr/sbin/nologin", user])
        defer { try? SystemTool.run("/usr/sbin/userdel", [user]) }
        // Opened to everyone on purpose: what the file system would refuse, the agent refuses too.
        #expect(chmod(fixture.directory, 0o755) == 0 && chmod(fixture.socket, 0o777) == 0)
        let listed = try fixture.run("/usr/bin/ssh-add", ["-L"], via: ["/usr/sbin/runuser", "-u", user, "--"])
        #expect(listed.status != 0, "\(listed.output)")
        #expect(!listed.output.contains("ecdsa-sha2-nistp256"), "\(listed.output)")
        #expect(fixture.agentErrors.contains("this agent serves uid 0 only"), "\(fixture.agentErrors)")
        #expect(try fixture.run("/usr/bin/ssh-add", ["-L"]).status == 0, "the owner is still served")
    }

    static func message(_ type: UInt8, _ text: String) -> [UInt8] {
        var writer = SSHWireWriter()
        writer.byte(type)
        writer.string(text)
        return writer.bytes
    }
}

struct AgentTestError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// A raw agent client: one Unix socket, framed messages.
final class AgentClient {
    private var descriptor: Int32

    init(_ path: String) throws {
        descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0, withUnixSocketAddress(path, { connect(descriptor, $0, $1) }) == 0 else {
            throw AgentTestError("cannot connect to \(path): \(String(cString: strerror(errno)))")
        }
    }

    func send(_ bytes: [UInt8]) throws {
        try writeAll(descriptor, bytes)
    }

    /// One response's body, or nil when the agent closed the connection.
    func receive() throws -> [UInt8]? {
        OwnerSocketServer.readMessage(descriptor, maximumLength: 1 << 24)
    }

    func ask(_ body: [UInt8]) throws -> [UInt8] {
        var framed = SSHWireWriter()
        framed.string(body)
        guard let answer = try askRaw(framed.bytes) else { throw AgentTestError("the agent closed the connection") }
        return answer
    }

    func askRaw(_ bytes: [UInt8]) throws -> [UInt8]? {
        try send(bytes)
        return try receive()
    }

    /// Hangs up; the descriptor is not closed a second time (its number may be another's by then).
    func close() {
        if descriptor >= 0 { Glibc.close(descriptor) }
        descriptor = -1
    }

    deinit { close() }
}

import Foundation
import SystemCalls
import TPMKeychainTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The agent with what people use it for: `ssh` logging in to a real sshd (on a free loopback
/// port, with its own host key and authorized_keys), git commits signed with `gpg.format=ssh`,
/// and each of them failing cleanly when the key's access control refuses. Then a crowd of
/// clients that connect and hang up.
@Suite("ssh, sshd and git through the agent", .serialized)
struct OpenSSHClientsTests {
    typealias Fixture = AgentWithOpenSSHTests.Fixture

    /// The public key line (`ecdsa-sha2-nistp256 AAAA… label`) the agent lists for `label`.
    static func keyLine(_ label: String, in fixture: Fixture) throws -> String {
        let listed = try fixture.run("/usr/bin/ssh-add", ["-L"]).output.split(separator: "\n")
        return String(try #require(listed.first { $0.hasSuffix(" " + label) }, "\(listed)"))
    }

    @Test(
        "ssh logs in to an sshd with the agent's key; the agent names the host it signed for",
        .enabled(if: geteuid() == 0, "needs root: sshd changes to the user it logs in"))
    func sshLogsIn() throws {
        let fixture = try Fixture()
        let sshd = try TestSSHD(in: fixture.directory, authorizing: [try Self.keyLine("laptop", in: fixture)])
        let marker = "logged-in-" + UUID().uuidString
        let login = try fixture.run("/usr/bin/ssh", sshd.clientArguments(agent: fixture.socket) + ["echo", marker])
        #expect(login.status == 0, "\(login.output)\n\(sshd.log)\n\(fixture.agentErrors)")
        #expect(login.output.contains(marker), "\(login.output)")
        // ssh binds its connection to the server's host key (session-bind@openssh.com) before it signs.
        #expect(
            fixture.agentErrors.contains("signed for /usr/bin/ssh (pid")
                && fixture.agentErrors.contains("to host key \(sshd.hostKeyFingerprint)"),
            "\(fixture.agentErrors)")
        #expect(sshd.log.contains("Accepted publickey for"), "\(sshd.log)")
    }

    @Test("git signs a commit with the agent's key (gpg.format=ssh), and git verifies it")
    func gitSignsCommits() throws {
        let fixture = try Fixture()
        let git = try TestRepository(in: fixture, signingKey: try Self.keyLine("laptop", in: fixture))
        let committed = try git.commit("signed by a key in the TPM")
        #expect(committed.status == 0, "\(committed.output)\n\(fixture.agentErrors)")
        let verified = try git.run(["-c", "gpg.ssh.allowedSignersFile=" + git.allowedSigners, "verify-commit", "HEAD"])
        #expect(verified.status == 0, "\(verified.output)")
        #expect(verified.output.contains("Good \"git\" signature for tpm@example.org"), "\(verified.output)")
        #expect(fixture.agentErrors.contains("signed for /usr/bin/ssh-keygen"), "\(fixture.agentErrors)")
        // The chain that led to the signature, from the kernel: git ran ssh-keygen.
        #expect(fixture.agentErrors.contains(" → git → ssh-keygen\""), "\(fixture.agentErrors)")
    }

    /// How the person answers the passcode prompt in ``refusalsFailCleanly(_:)``.
    enum Answer: String, CaseIterable, CustomTestStringConvertible {
        case wrongPasscode, cancelled
        var testDescription: String { rawValue }
    }

    @Test(
        "a wrong passcode or a cancelled prompt makes ssh, ssh-keygen -Y sign and a signed commit fail, and nothing is made",
        arguments: Answer.allCases)
    func refusalsFailCleanly(_ answer: Answer) throws {
        let answerFile = NSTemporaryDirectory() + "ssh-refusal-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: answerFile) }
        switch answer {
        case .wrongPasscode: try "not-the-passcode".write(toFile: answerFile, atomically: true, encoding: .utf8)
        case .cancelled: break // No answer file: cat fails, the command exits 1, a cancel.
        }
        let fixture = try Fixture(guardedKey: true, agentArguments: ["--passcode-command", "cat \(answerFile)"])
        let guarded = try Self.keyLine("guarded", in: fixture)

        let signed = try AgentWithOpenSSHTests.sign("guarded", in: fixture)
        #expect(signed.status != 0, "\(signed.output)")
        #expect(signed.output.contains("agent refused operation"), "\(signed.output)")

        let git = try TestRepository(in: fixture, signingKey: guarded)
        let committed = try git.commit("must not be made")
        #expect(committed.status != 0, "\(committed.output)")
        #expect(try git.run(["rev-parse", "--verify", "-q", "HEAD"]).status != 0, "no commit was made")

        if geteuid() == 0 {
            let sshd = try TestSSHD(in: fixture.directory, authorizing: [guarded])
            let login = try fixture.run(
                "/usr/bin/ssh", sshd.clientArguments(agent: fixture.socket, identity: guarded) + ["true"])
            #expect(login.status == 255, "\(login.output)")
            #expect(login.output.contains("Permission denied (publickey)"), "\(login.output)")
            #expect(!sshd.log.contains("Accepted publickey"), "\(sshd.log)")
        }
        let refusals = fixture.agentErrors.split(separator: "\n").filter { $0.contains("refused a signature") }
        #expect(refusals.count >= 2, "\(fixture.agentErrors)")
        switch answer {
        case .cancelled:
            #expect(refusals.allSatisfy { $0.contains("The passcode prompt was cancelled") }, "\(refusals)")
            // A cancel costs no try: the key is still there, and signs once the person answers.
            try Fixture.passcode.write(toFile: answerFile, atomically: true, encoding: .utf8)
            let answered = try AgentWithOpenSSHTests.sign("guarded", in: fixture)
            #expect(answered.status == 0, "\(answered.output)\n\(fixture.agentErrors)")
        case .wrongPasscode:
            // Each wrong passcode is the TPM's to count: after a few it locks out, and says so.
            #expect(
                refusals.allSatisfy {
                    $0.contains("Wrong device passcode (the TPM counted this try")
                        || $0.contains("dictionary-attack lockout")
                }, "\(refusals)")
            #expect(refusals.first?.contains("Wrong device passcode") == true, "\(refusals)")
        }
    }

    @Test(
        "started by its socket (systemd socket activation), the agent serves the socket it is handed and leaves it there"
    )
    func socketActivation() throws {
        // The fixture's own agent stands aside; the store and its keys stay.
        let fixture = try Fixture()
        kill(fixture.agent.processIdentifier, SIGTERM)
        fixture.agent.waitUntilExit()
        let socket = fixture.directory + "/activated.socket"
        let errors = fixture.directory + "/activated.err"
        _ = FileManager.default.createFile(atPath: errors, contents: nil)
        // systemd-socket-activate closes every descriptor but the socket before it becomes the
        // agent, the one Foundation's Process watches among them (as sshd does): a shell holds it.
        let activator = Process()
        activator.executableURL = URL(fileURLWithPath: "/bin/sh")
        // The agent's own -a names another path: the socket handed over wins.
        activator.arguments = [
            "-c", "\"$@\"; exit $?", "sh", "/usr/bin/systemd-socket-activate", "-l", socket, "-E",
            "TPM_KEYCHAIN_TCTI", "-E", "XDG_STATE_HOME", "-E", "XDG_DATA_HOME", Fixture.tool("tpm-keychain-ssh-agent"),
            "--keychain", fixture.store, "-a", fixture.directory + "/unused.socket",
        ]
        activator.environment = fixture.environment
        activator.standardOutput = FileHandle.nullDevice
        activator.standardError = FileHandle(forWritingAtPath: errors)
        activator.standardInput = FileHandle.nullDevice
        try activator.run()
        // The shell's child: systemd-socket-activate, which becomes the agent in the same process.
        let agentPID = {
            Int32(
                TestSSHD.contents(
                    of: "/proc/\(activator.processIdentifier)/task/\(activator.processIdentifier)/children"
                )
                .split(separator: " ").first ?? "") ?? 0
        }
        defer {
            if activator.isRunning {
                if agentPID() > 0 { kill(agentPID(), SIGTERM) }
                activator.waitUntilExit()
            }
        }
        let deadline = ContinuousClock.now + .seconds(60)
        while !FileManager.default.fileExists(atPath: socket), activator.isRunning, ContinuousClock.now < deadline {
            usleep(10_000)
        }
        // The first client's connection starts the agent, which answers it.
        let listed = try fixture.run("/usr/bin/env", ["SSH_AUTH_SOCK=" + socket, "/usr/bin/ssh-add", "-L"])
        #expect(
            listed.status == 0 && listed.output.hasSuffix(" laptop\n"),
            "\(listed.output)\n\(TestSSHD.contents(of: errors))")
        #expect(
            TestSSHD.contents(of: errors).contains("serving \(socket), handed over by the service manager"),
            "\(TestSSHD.contents(of: errors))")
        #expect(!FileManager.default.fileExists(atPath: fixture.directory + "/unused.socket"))
        // Stopped, the agent leaves the manager's socket in place for the next start.
        let pid = agentPID()
        #expect(pid > 0)
        if pid > 0 { kill(pid, SIGTERM) }
        activator.waitUntilExit()
        #expect(FileManager.default.fileExists(atPath: socket))
    }

    @Test(
        "a thousand clients that connect and hang up (before, during or after a message) cost the agent nothing"
    )
    func aThousandClientsHangUp() throws {
        let fixture = try Fixture()
        let listed = try fixture.run("/usr/bin/ssh-add", ["-L"])
        // A first signature opens what the agent keeps open (the store, the record of key uses).
        #expect(try AgentWithOpenSSHTests.sign("laptop", in: fixture).status == 0)
        let descriptors = {
            (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(fixture.agent.processIdentifier)/fd"))?.count
                ?? -1
        }
        // The agent's address space, in bytes (statm's first field is pages).
        let addressSpace = {
            let statm = (try? String(contentsOfFile: "/proc/\(fixture.agent.processIdentifier)/statm", encoding: .utf8))
            return (statm?.split(separator: " ").first.flatMap { Int($0) } ?? 0) * Int(sysconf(Int32(_SC_PAGESIZE)))
        }
        let before = descriptors()
        let spaceBefore = addressSpace()
        #expect(spaceBefore > 0, "the agent's /proc/PID/statm could not be read")
        let failures = Locked<[String]>([])
        let socket = fixture.socket
        DispatchQueue.concurrentPerform(iterations: 1000) { index in
            do {
                let client = try AgentClient(socket)
                switch index % 4 {
                case 0: break // Connects and hangs up.
                case 1: try client.send([0, 0, 0, 40, 13, 0, 0]) // Half a sign request.
                case 2: try client.send([0, 0, 0, 1, 11]) // A listing it does not wait for.
                default: _ = try client.ask([11]) // A listing it reads.
                }
                client.close()
            } catch {
                // A refusal at the connection limit is a clean close; anything else is not expected.
                failures.withLock { $0.append("\(index): \(error)") }
            }
        }
        let failed = failures.withLock { $0 }
        #expect(failed.isEmpty, "\(failed.count) clients failed, first: \(failed.prefix(3))\n\(fixture.agentErrors)")
        #expect(fixture.agent.isRunning)
        #expect(try fixture.run("/usr/bin/ssh-add", ["-L"]).output == listed.output)
        #expect(try AgentWithOpenSSHTests.sign("laptop", in: fixture).status == 0)
        // Every connection's descriptor is closed once its thread ends: wait for them to end.
        let deadline = ContinuousClock.now + .seconds(60)
        while descriptors() > before, ContinuousClock.now < deadline { usleep(20_000) }
        #expect(descriptors() <= before, "descriptors before: \(before), after: \(descriptors())")
        // Nor does its memory stay: an ended thread's stack (8 MB of address space each) is unmapped
        // or reused, not kept for a join that never comes. glibc keeps a few stacks (40 MB) and
        // malloc an arena per thread at most (64 MB each, 8 per core), so 1 GB is a generous bound;
        // a thousand connections leaving their stacks add 8 GB.
        let bound = spaceBefore + (1 << 30)
        while addressSpace() > bound, ContinuousClock.now < deadline { usleep(20_000) }
        #expect(addressSpace() <= bound, "address space before: \(spaceBefore), after: \(addressSpace())")
    }
}

/// OpenSSH's sshd for one test: a free loopback port, a host key and authorized_keys of its own,
/// no PAM and no passwords; stopped by its own pid.
final class TestSSHD {
    let directory: String
    let port: Int
    /// The shell that started sshd and waits for it.
    let process: Process
    let sshdPID: Int32
    let knownHosts: String
    let hostKeyFingerprint: String
    private let logPath: String

    var log: String { Self.contents(of: logPath) }

    static func contents(of path: String) -> String {
        (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
    }

    init(in parent: String, authorizing keys: [String]) throws {
        directory = parent + "/sshd-" + UUID().uuidString.prefix(8)
        try FileManager.default.createDirectory(
            atPath: directory, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        let hostKey = directory + "/host_ed25519"
        try SystemTool.run("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", hostKey])
        let hostPublicKey = try String(contentsOfFile: hostKey + ".pub", encoding: .utf8)
            .split(separator: " ").prefix(2).joined(separator: " ")
        let fingerprint = String(
            decoding: try SystemTool.output("/usr/bin/ssh-keygen", ["-l", "-f", hostKey + ".pub"]), as: UTF8.self)
        hostKeyFingerprint = String(fingerprint.split(separator: " ")[1])
        let authorized = directory + "/authorized_keys"
        try (keys.joined(separator: "\n") + "\n").write(toFile: authorized, atomically: true, encoding: .utf8)
        // sshd's privilege separation directory, which Debian's service unit would make.
        if !FileManager.default.fileExists(atPath: "/run/sshd") {
            try FileManager.default.createDirectory(
                atPath: "/run/sshd", withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        }
        let logPath = directory + "/sshd.log"
        self.logPath = logPath
        var log: String { Self.contents(of: logPath) }
        // A port free a moment ago may be taken by the time sshd binds it: then another is tried.
        var started: (port: Int, process: Process, pid: Int32)?
        let pidFile = directory + "/sshd.pid"
        for _ in 0..<5 where started == nil {
            let port = try Self.freePort()
            let config = directory + "/sshd_config"
            try """
            Port \(port)
            ListenAddress 127.0.0.1
            HostKey \(hostKey)
            AuthorizedKeysFile \(authorized)
            PidFile \(pidFile)
            StrictModes no
            UsePAM no
            PasswordAuthentication no
            KbdInteractiveAuthentication no
            PubkeyAuthentication yes
            PermitRootLogin prohibit-password
            LogLevel VERBOSE

            """.write(toFile: config, atomically: true, encoding: .utf8)
            _ = FileManager.default.createFile(atPath: logPath, contents: nil)
            // sshd closes every descriptor it inherits, the one Foundation's Process watches for
            // its child's end among them: then Process would wait for a running sshd and stop
            // noticing every other child. A shell holds that descriptor and waits for sshd, which
            // writes its own pid to be stopped by.
            try? FileManager.default.removeItem(atPath: pidFile)
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/bin/sh")
            process.arguments = ["-c", "/usr/sbin/sshd -D -e -f \"$1\"", "sshd", config]
            process.standardError = FileHandle(forWritingAtPath: logPath)
            process.standardOutput = FileHandle.nullDevice
            process.standardInput = FileHandle.nullDevice
            try process.run()
            let deadline = ContinuousClock.now + .seconds(60)
            while process.isRunning,
                !log.contains("Server listening on 127.0.0.1 port \(port)")
                    || !TestSSHD.contents(of: pidFile).hasSuffix("\n"),
                ContinuousClock.now < deadline
            {
                usleep(10_000)
            }
            let pid = Int32(TestSSHD.contents(of: pidFile).trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
            if process.isRunning, pid > 0, log.contains("Server listening") {
                started = (port, process, pid)
            } else if process.isRunning {
                if pid > 0 { kill(pid, SIGTERM) }
                process.waitUntilExit()
            }
        }
        guard let started else { throw AgentTestError("sshd did not start: \(log)") }
        (port, process, sshdPID) = started
        knownHosts = directory + "/known_hosts"
        try "[127.0.0.1]:\(port) \(hostPublicKey)\n".write(toFile: knownHosts, atomically: true, encoding: .utf8)
    }

    /// `ssh`'s arguments up to the command: this server, known by its host key, the user
    /// running the test, keys from `agent` only (`identity`: only that one of them).
    func clientArguments(agent: String, identity: String? = nil) throws -> [String] {
        var arguments = [
            "-F", "/dev/null", "-o", "IdentityAgent=\(agent)", "-o", "BatchMode=yes", "-o",
            "UserKnownHostsFile=\(knownHosts)", "-o", "GlobalKnownHostsFile=/dev/null", "-o",
            "StrictHostKeyChecking=yes", "-p", String(port),
        ]
        if let identity {
            let file = directory + "/identity-\(UUID().uuidString).pub"
            try (identity + "\n").write(toFile: file, atomically: true, encoding: .utf8)
            arguments += ["-o", "IdentityFile=\(file)", "-o", "IdentitiesOnly=yes"]
        }
        let user = getpwuid(geteuid()).map { String(cString: $0.pointee.pw_name) } ?? "root"
        return arguments + ["\(user)@127.0.0.1"]
    }

    static func freePort() throws -> Int {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, length) == 0 && getsockname(descriptor, $0, &length) == 0
            }
        }
        guard bound else { throw AgentTestError("no free loopback port") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    deinit {
        if process.isRunning {
            kill(sshdPID, SIGTERM)
            process.waitUntilExit()
        }
    }
}

/// A git repository whose commits are signed with an SSH key through the fixture's agent.
struct TestRepository {
    let fixture: AgentWithOpenSSHTests.Fixture
    let path: String
    let allowedSigners: String
    let signingKey: String

    init(in fixture: AgentWithOpenSSHTests.Fixture, signingKey: String) throws {
        self.fixture = fixture
        self.signingKey = signingKey
        path = fixture.directory + "/repository-" + UUID().uuidString.prefix(8)
        allowedSigners = path + ".allowed_signers"
        let key = signingKey.split(separator: " ").prefix(2).joined(separator: " ")
        try "tpm@example.org \(key)\n".write(toFile: allowedSigners, atomically: true, encoding: .utf8)
        try AgentWithOpenSSHTests.Fixture.expectSuccess(try fixture.run("/usr/bin/git", ["init", "-q", path]))
    }

    func run(_ arguments: [String]) throws -> (status: Int32, output: String) {
        try fixture.run("/usr/bin/git", ["-C", path] + arguments)
    }

    /// `git commit -S` of an empty commit, signed with `signingKey` (a literal key, as git allows).
    func commit(_ message: String) throws -> (status: Int32, output: String) {
        try run([
            "-c", "user.name=TPM Keychain", "-c", "user.email=tpm@example.org", "-c", "gpg.format=ssh", "-c",
            "user.signingKey=key::" + signingKey, "commit", "--allow-empty", "-S", "-q", "-m", message,
        ])
    }
}

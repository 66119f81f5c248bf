import Foundation
import SystemCalls
import TPMKeychain
import TPMKeychainTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The warm path (docs/ARCHITECTURE.md): with `tpm-keychain hold-session` running, a fresh
/// process of the CLI, the git helper and SecItem reads an item under the master key with no TPM
/// command, counted by a recording proxy in front of the test's own swtpm; without the holder,
/// or for what the holder does not answer, the same result comes through the cold path.
@Suite("the session holder's warm path", .serialized)
struct WarmPathTests {
    /// A private swtpm behind a recording proxy, a store, and a holder started on demand.
    final class Fixture: @unchecked Sendable {
        let simulator: SoftwareTPM
        let proxy: RecordingTPMProxy
        let directory: String
        let store: String
        let socket: String
        private(set) var holder: RunningCLI?

        init() throws {
            simulator = try SoftwareTPM.start()
            proxy = try RecordingTPMProxy.start(forwardingTo: simulator.port)
            directory = try makeScratchDirectory("warm")
            store = directory + "/keychain"
            socket = directory + "/session.socket"
        }

        var environment: [String: String?] {
            [
                "TPM_KEYCHAIN_TCTI": proxy.tcti, "XDG_DATA_HOME": directory + "/xdg-data",
                "XDG_STATE_HOME": directory + "/xdg-state", SessionHolder.socketVariable: socket,
            ]
        }

        /// The same, with the warm path turned off.
        var coldEnvironment: [String: String?] {
            environment.merging([SessionHolder.socketVariable: ""]) { $1 }
        }

        /// Starts the holder and waits until its socket is there (its first line says so).
        func startHolder(socket path: String? = nil) throws {
            let running = try CLI.start(
                ["hold-session", "--socket", path ?? socket], environment: environment, stdinPipe: false)
            holder = running
            let deadline = ContinuousClock.now + CLI.timeout
            while !running.standardErrorSoFar.contains("serving ") {
                guard running.process.isRunning, ContinuousClock.now < deadline else {
                    throw CLIError("the holder did not start: \(running.standardErrorSoFar)")
                }
                usleep(5_000)
            }
        }

        /// Stops the holder (SIGTERM, as its unit's stop does) and returns what it logged.
        @discardableResult
        func stopHolder() throws -> CLIResult? {
            guard let holder else { return nil }
            holder.process.terminate()
            self.holder = nil
            return try holder.finish()
        }

        func cli(_ arguments: [String], warm: Bool = true, stdin: String? = nil) throws -> CLIResult {
            try CLI.run(
                arguments, environment: warm ? environment : coldEnvironment, stdin: stdin.map { Data($0.utf8) })
        }

        func gitHelper(_ operation: String, _ input: String, warm: Bool = true) throws -> CLIResult {
            try CLI.run(
                ["--keychain", store, operation], environment: warm ? environment : coldEnvironment,
                stdin: Data(input.utf8), executable: EveryFaceDecisionTests.tool("git-credential-tpm-keychain"))
        }

        func secItem(_ operation: String, warm: Bool = true) throws -> CLIResult {
            try CLI.run(
                ["secItem", operation, "--keychain", store, "--tcti", proxy.tcti],
                environment: warm ? environment : coldEnvironment,
                executable: EveryFaceDecisionTests.tool("tpm-keychain-face-probe"))
        }

        /// The commands `body` made the TPM receive.
        func commands(_ body: () throws -> Void) rethrows -> [String] {
            proxy.reset()
            try body()
            return proxy.commandCodes.map(RecordingTPMProxy.commandName)
        }

        deinit {
            _ = try? stopHolder()
            proxy.stop()
            simulator.stop()
            try? FileManager.default.removeItem(atPath: directory)
        }
    }

    static let gitQuery = "protocol=https\nhost=git.example\n\n"

    /// A generic password for the CLI and SecItem (the face probe's service "face", account
    /// "item") and a git credential, written through the cold path.
    static func populated() throws -> Fixture {
        let fixture = try Fixture()
        let added = try fixture.cli(
            ["add-generic-password", "-s", "face", "-a", "item", "--keychain", fixture.store], warm: false,
            stdin: "warm secret")
        #expect(added.status == 0, "\(added)")
        let stored = try fixture.gitHelper(
            "store", "protocol=https\nhost=git.example\nusername=octo\npassword=git secret\n\n", warm: false)
        #expect(stored.status == 0, "\(stored)")
        return fixture
    }

    func lookUp(_ fixture: Fixture, warm: Bool = true) throws -> CLIResult {
        try fixture.cli(
            ["find-generic-password", "-s", "face", "-a", "item", "-w", "--keychain", fixture.store], warm: warm)
    }

    @Test(
        "with the holder running, a fresh CLI, git helper and SecItem process each read an item with 0 TPM commands; without it, the same answers through the cold path",
        .timeLimit(.minutes(5)))
    func warmReadsSendNoTPMCommand() throws {
        let fixture = try Self.populated()
        // Without a holder: the cold path, whose commands the proxy sees.
        var cold: CLIResult?
        let coldCommands = try fixture.commands { cold = try lookUp(fixture, warm: false) }
        #expect(cold?.stdout == "warm secret\n", "\(String(describing: cold))")
        #expect(!coldCommands.isEmpty)

        try fixture.startHolder()
        // The holder's first read of the store opens it: that read pays the unseal.
        var result: CLIResult?
        let opening = try fixture.commands { result = try lookUp(fixture) }
        #expect(result?.stdout == "warm secret\n")
        #expect(!opening.isEmpty)

        let cli = try fixture.commands { result = try lookUp(fixture) }
        #expect(result?.stdout == "warm secret\n", "\(String(describing: result))")
        #expect(cli == [], "a warm CLI lookup sent \(cli)")

        let git = try fixture.commands { result = try fixture.gitHelper("get", Self.gitQuery) }
        #expect(result?.stdout == "username=octo\npassword=git secret\n", "\(String(describing: result))")
        #expect(git == [], "a warm git credential get sent \(git)")

        let secItem = try fixture.commands { result = try fixture.secItem("SecItemCopyMatching data") }
        #expect(result?.stdout == "allowed\n", "\(String(describing: result))")
        #expect(secItem == [], "a warm SecItemCopyMatching sent \(secItem)")

        // A busy process asks the holder 32 times, then opens the store itself: one cold open.
        let busy = try fixture.commands {
            result = try CLI.run(
                ["keychain", "string(forKey:) 40 times", "--keychain", fixture.store, "--tcti", fixture.proxy.tcti],
                environment: fixture.environment, executable: EveryFaceDecisionTests.tool("tpm-keychain-face-probe"))
        }
        #expect(result?.stdout == "allowed\n", "\(String(describing: result))")
        #expect(busy.contains("Unseal") && busy.filter { $0 == "Unseal" }.count == 1, "\(busy)")

        // The cold path still gives the same answers beside a running holder.
        #expect(try lookUp(fixture, warm: false).stdout == "warm secret\n")
        #expect(
            try fixture.gitHelper("get", Self.gitQuery, warm: false).stdout == "username=octo\npassword=git secret\n")
    }

    @Test(
        "a write, a missing item and a protected item take the cold path and give their usual answers; a write is seen by the next warm read",
        .timeLimit(.minutes(5)))
    func whatTheHolderDoesNotAnswer() throws {
        let fixture = try Self.populated()
        try fixture.startHolder()
        #expect(try lookUp(fixture).stdout == "warm secret\n")
        // A missing item: the same message and status as without a holder.
        let missing = ["find-generic-password", "-s", "face", "-a", "absent", "-w", "--keychain", fixture.store]
        let (warmMissing, coldMissing) = (try fixture.cli(missing), try fixture.cli(missing, warm: false))
        #expect(warmMissing.status == 44 && warmMissing.status == coldMissing.status, "\(warmMissing)")
        #expect(warmMissing.lastErrorLine == coldMissing.lastErrorLine)
        // A write goes through the caller's own path; the holder's next read sees it.
        let updated = try fixture.cli(
            ["add-generic-password", "-U", "-s", "face", "-a", "item", "--keychain", fixture.store], stdin: "changed")
        #expect(updated.status == 0, "\(updated)")
        var changed: CLIResult?
        let read = try fixture.commands { changed = try lookUp(fixture) }
        #expect(changed?.stdout == "changed\n")
        #expect(read == [])
        // A store removed and made again at the same path: the holder lets go of the one it
        // held and answers from the new one, as the cold path does.
        #expect(try fixture.cli(["delete-keychain", fixture.store]).status == 0)
        let gone = try fixture.cli([
            "find-generic-password", "-s", "face", "-a", "item", "-w", "--keychain", fixture.store,
        ])
        #expect(gone.status == 66, "\(gone)")
        let again = try fixture.cli(
            ["add-generic-password", "-s", "face", "-a", "item", "--keychain", fixture.store], stdin: "made again")
        #expect(again.status == 0, "\(again)")
        #expect(try lookUp(fixture).stdout == "made again\n")
        // A devicePasscode item needs the TPM: the holder answers "cold", the CLI asks for the passcode.
        #expect(
            try fixture.cli(
                ["set-passcode", "--passcode-fd", "0", "--keychain", fixture.store], stdin: "warm passcode 1\n"
            ).status == 0)
        let protected = try fixture.cli(
            [
                "add-generic-password", "-s", "face", "-a", "pin", "--access-control", "devicePasscode",
                "--keychain", fixture.store,
            ], stdin: "pin secret")
        #expect(protected.status == 0, "\(protected)")
        var pin: CLIResult?
        let pinCommands = try fixture.commands {
            pin = try fixture.cli(
                [
                    "find-generic-password", "-s", "face", "-a", "pin", "-w", "--passcode-fd", "0", "--keychain",
                    fixture.store,
                ], stdin: "warm passcode 1\n")
        }
        #expect(pin?.stdout == "pin secret\n", "\(String(describing: pin))")
        #expect(!pinCommands.isEmpty, "the TPM gate of a protected item was skipped")
    }

    @Test(
        "a lock makes the holder erase its keys: reads go cold (same answers) until an unlock, then warm again; a stop erases them too",
        .timeLimit(.minutes(5)))
    func lockErasesTheHeldKeys() throws {
        let fixture = try Self.populated()
        #expect(
            try fixture.cli(
                ["set-passcode", "--passcode-fd", "0", "--keychain", fixture.store], stdin: "warm passcode 1\n"
            ).status == 0)
        try fixture.startHolder()
        #expect(try lookUp(fixture).stdout == "warm secret\n")
        #expect(try fixture.commands { _ = try lookUp(fixture) } == [])

        #expect(try fixture.cli(["lock-keychain", "--keychain", fixture.store]).status == 0)
        var result: CLIResult?
        let locked = try fixture.commands { result = try lookUp(fixture) }
        #expect(result?.stdout == "warm secret\n", "\(String(describing: result))")
        #expect(!locked.isEmpty, "the holder answered after a lock")
        #expect(fixture.holder?.standardErrorSoFar.contains("every key held is erased") == true)

        let unlocked = try fixture.cli(
            ["unlock-keychain", "--passcode-fd", "0", "--keychain", fixture.store], stdin: "warm passcode 1\n")
        #expect(unlocked.status == 0, "\(unlocked)")
        _ = try lookUp(fixture) // the holder opens the store again
        #expect(try fixture.commands { result = try lookUp(fixture) } == [])
        #expect(result?.stdout == "warm secret\n")

        // SIGTERM, as a unit's stop sends it: the holder erases its keys, removes its socket and
        // dies of the signal.
        let stopped = try fixture.stopHolder()
        #expect(stopped?.killedBySignal == true && stopped?.status == SIGTERM, "\(String(describing: stopped))")
        #expect(!FileManager.default.fileExists(atPath: fixture.socket))
        // With the holder gone, the cold path runs.
        #expect(try lookUp(fixture).stdout == "warm secret\n")
    }

    @Test(
        "hostile clients: malformed frames, a client that hangs up mid-request and 200 clients at once leave the holder serving; a socket of another owner is never asked",
        .timeLimit(.minutes(5)))
    func hostileClients() throws {
        let fixture = try Self.populated()
        try fixture.startHolder()
        #expect(try lookUp(fixture).stdout == "warm secret\n")
        let valid = try Self.requestFrame(fixture)
        for frame in [
            [0, 0, 0, 0], [0xff, 0xff, 0xff, 0xff], [0, 0, 0, 3, 1, 9, 9], Array(valid.prefix(valid.count / 2)),
            [0, 0, 0, 2, 7, 1], Array((0..<64).map { UInt8(truncatingIfNeeded: $0 &* 37) }),
        ] as [[UInt8]] {
            let answer = try Self.exchange(fixture.socket, frame)
            #expect(answer.isEmpty, "a malformed frame was answered: \(frame)")
        }
        // A whole request is answered, 200 times over in parallel, each with the secret.
        let answers = Locked<[Int]>([])
        DispatchQueue.concurrentPerform(iterations: 200) { _ in
            let answer = (try? Self.exchange(fixture.socket, valid)) ?? []
            answers.withLock { $0.append(answer.count) }
        }
        #expect(answers.withLock { $0.count } == 200)
        #expect(answers.withLock { $0.allSatisfy { $0 > 4 } }, "some clients got no answer")
        #expect(fixture.holder?.process.isRunning == true)
        var after: CLIResult?
        #expect(try fixture.commands { after = try lookUp(fixture) } == [])
        #expect(after?.stdout == "warm secret\n")

        // Something else at the socket's path (not this user's socket): never asked; cold path.
        let elsewhere = fixture.directory + "/not-a-socket"
        #expect(FileManager.default.createFile(atPath: elsewhere, contents: Data("x".utf8)))
        var environment = fixture.environment
        environment[SessionHolder.socketVariable] = elsewhere
        let result = try CLI.run(
            ["find-generic-password", "-s", "face", "-a", "item", "-w", "--keychain", fixture.store],
            environment: environment)
        #expect(result.stdout == "warm secret\n", "\(result)")
    }

    @Test(
        "another local user (useradd) is refused by the holder even through a socket it may open, and never reads the owner's items",
        .enabled(if: geteuid() == 0, "needs root: the test creates a second user with useradd"),
        .timeLimit(.minutes(5)))
    func anotherUserIsRefused() throws {
        let fixture = try Self.populated()
        // A socket another user can reach, as a careless unit might make it: the holder's own check must hold.
        let shared = try makeScratchDirectory("warm-shared")
        defer { try? FileManager.default.removeItem(atPath: shared) }
        chmod(shared, 0o755)
        let socket = shared + "/session.socket"
        try fixture.startHolder(socket: socket)
        chmod(socket, 0o666)
        let users = try OtherUsersTests.Users(count: 1)
        defer { users.remove() }
        let frame = try Self.requestFrame(fixture)
        let script = """
            import socket, sys
            s = socket.socket(socket.AF_UNIX)
            s.connect(sys.argv[1])
            try:
                s.sendall(bytes.fromhex(sys.argv[2]))
                data = s.recv(65536)
            except (ConnectionResetError, BrokenPipeError):  # closed before or with the request unread
                data = b""
            print("answered" if data else "closed", len(data))
            """
        let attempt = try CLI.run(
            [
                "-u", users.names[0], "--", "/usr/bin/python3", "-c", script, socket,
                frame.map { String(format: "%02x", $0) }.joined(),
            ],
            environment: [:], executable: "/usr/sbin/runuser")
        #expect(attempt.stdout.hasPrefix("closed 0"), "\(attempt)\n\(attempt.stderr)")
        #expect(!attempt.stdout.contains("warm secret"))
        #expect(fixture.holder?.standardErrorSoFar.contains("serves uid 0 only") == true)
        // The owner is still served.
        let owner = try Self.exchange(socket, frame)
        #expect(owner.count > 4)
    }

    // MARK: Raw frames

    /// A framed request for the fixture's generic password, as a client sends it.
    static func requestFrame(_ fixture: Fixture) throws -> [UInt8] {
        let target = HolderRequest.HolderStore(
            path: fixture.store, tcti: fixture.proxy.tcti, deviceDirectory: nil, face: .cli, accessGroups: nil)
        let request = HolderRequest.value(
            target, try ItemIdentity(accessGroup: "", service: "face", account: "item"))
        return OwnerSocketServer.framed(request.encoded)
    }

    /// Sends `bytes` to the holder and reads until it closes or answers one frame.
    static func exchange(_ path: String, _ bytes: [UInt8]) throws -> [UInt8] {
        let connection = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard connection >= 0 else { throw CLIError("socket: \(errno)") }
        defer { close(connection) }
        guard withUnixSocketAddress(path, { connect(connection, $0, $1) }) == 0 else {
            throw CLIError("connect \(path): \(errno)")
        }
        _ = bytes.withUnsafeBytes { send(connection, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        // A cut-short request: the holder waits for the rest; hang up as a client that went away.
        shutdown(connection, Int32(SHUT_WR))
        var answer: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = read(connection, &buffer, buffer.count)
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { break }
            answer += buffer[0..<count]
        }
        return answer
    }
}

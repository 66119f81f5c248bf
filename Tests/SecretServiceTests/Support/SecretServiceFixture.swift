import Foundation
import TPMKeychainTesting

#if canImport(Glibc)
import Glibc
#endif

struct FixtureError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// One finished client process.
struct ClientRun: CustomStringConvertible {
    let command: String
    let status: Int32
    let stdout: String
    let stderr: String

    var description: String { "\(command) -> \(status)\n--- stdout\n\(stdout)\n--- stderr\n\(stderr)" }
}

/// A private dbus-daemon (no service directories, so nothing is activated in our daemon's place),
/// a private swtpm, and `tpm-keychain secret-service` serving a private data directory on that bus.
/// All children of this process, stopped by their own PIDs; a missing dbus-daemon, swtpm or client
/// is a failure, not a skip.
final class SecretServiceFixture: @unchecked Sendable {
    static let python = "/usr/bin/python3"
    static let fixtures = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fixtures/secret-service").path
    /// Built next to the test bundle, since the test target depends on the executable target.
    static let tool: String = {
        let bundle =
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        return URL(fileURLWithPath: bundle).deletingLastPathComponent().appendingPathComponent("tpm-keychain").path
    }()

    let directory: String
    let address: String
    let simulator: SoftwareTPM
    var dataDirectory: String { directory + "/data" }
    private var bus: Process?
    private(set) var daemon: Process?

    /// - Parameter anyUserMayConnect: a bus that lets every local user connect (a session bus lets
    ///   only its owner), to show the daemon's own check.
    init(anyUserMayConnect: Bool = false, startDaemon: Bool = true) throws {
        var template = Array("/tmp/secret-service-tests-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw FixtureError("mkdtemp failed") }
        directory = String(cString: made)
        chmod(directory, 0o755)
        address = "unix:path=\(directory)/bus"
        simulator = try SoftwareTPM.start()
        do {
            try startBus(anyUserMayConnect: anyUserMayConnect)
            if startDaemon { try self.startDaemon() }
        } catch {
            stop()
            throw error
        }
    }

    deinit { stop() }

    func stop() {
        stopDaemon()
        if let bus, bus.isRunning {
            kill(bus.processIdentifier, SIGKILL)
            bus.waitUntilExit()
        }
        bus = nil
        simulator.stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// The environment every process of the fixture runs with.
    var environment: [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment["DBUS_SESSION_BUS_ADDRESS"] = address
        environment["TPM_KEYCHAIN_TCTI"] = simulator.tcti
        environment["HOME"] = directory
        environment["XDG_DATA_HOME"] = directory + "/xdg"
        environment["TPM_KEYCHAIN_TEST_CLOCK_OFFSET_FILE"] = testClockFile
        return environment
    }

    /// Seconds the grants' leases are judged ahead of the real time by, in the fixture's
    /// processes (debug builds' test clock, `GrantBook.now()`); none until a test writes it.
    var testClockFile: String { directory + "/test-clock-offset" }

    private func startBus(anyUserMayConnect: Bool) throws {
        let config = """
            <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
             "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
            <busconfig>
              <type>session</type>
              <listen>\(address)</listen>
              <auth>EXTERNAL</auth>
              \(anyUserMayConnect ? "<allow_anonymous/>" : "")
              <policy context="default">
                \(anyUserMayConnect ? "<allow user=\"*\"/>" : "")
                <allow send_destination="*" eavesdrop="true"/>
                <allow eavesdrop="true"/>
                <allow own="*"/>
              </policy>
            </busconfig>
            """
        try config.write(toFile: "\(directory)/bus.conf", atomically: true, encoding: .utf8)
        let process = try Self.launch(
            "/usr/bin/dbus-daemon",
            ["--config-file=\(directory)/bus.conf", "--nofork", "--nopidfile", "--nosyslog"],
            environment: environment, output: "\(directory)/dbus-daemon.log")
        bus = process
        // Observed progress: the socket exists once dbus-daemon listens on it.
        try waitUntil("dbus-daemon listens", process: process, log: "\(directory)/dbus-daemon.log") {
            FileManager.default.fileExists(atPath: "\(self.directory)/bus")
        }
        if anyUserMayConnect { chmod("\(directory)/bus", 0o777) }
    }

    /// Starts the daemon and waits until it says it serves the name.
    /// - Parameter withoutTCTI: no `TPM_KEYCHAIN_TCTI`, as on a desktop without a TPM setting.
    /// - Returns: the daemon's log file.
    @discardableResult
    func startDaemon(
        extraArguments: [String] = [], withoutTCTI: Bool = false, environment extra: [String: String] = [:]
    ) throws -> String {
        let log = "\(directory)/daemon-\(UUID().uuidString).log"
        var environment = environment.merging(extra) { $1 }
        if withoutTCTI { environment["TPM_KEYCHAIN_TCTI"] = nil }
        let process = try Self.launch(
            Self.tool,
            ["secret-service", "--address", address, "--data-directory", dataDirectory] + extraArguments,
            environment: environment, output: log)
        daemon = process
        try waitUntil("the daemon owns org.freedesktop.secrets", process: process, log: log) {
            ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("serving org.freedesktop.secrets")
        }
        return log
    }

    /// Stops the daemon with SIGTERM (an orderly end) and returns its exit status.
    @discardableResult
    func stopDaemon(signal: Int32 = SIGTERM) -> Int32? {
        guard let daemon else { return nil }
        if daemon.isRunning { kill(daemon.processIdentifier, signal) }
        daemon.waitUntilExit()
        self.daemon = nil
        return daemon.terminationStatus
    }

    // MARK: Clients

    /// Runs a client to its end (killed after 120 s), with the fixture's environment.
    func run(
        _ executable: String, _ arguments: [String], stdin: String? = nil, environment extra: [String: String] = [:]
    ) throws -> ClientRun {
        let output = "\(directory)/client-\(UUID().uuidString)"
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.environment = environment.merging(extra) { $1 }
        _ = FileManager.default.createFile(atPath: output + ".out", contents: nil)
        _ = FileManager.default.createFile(atPath: output + ".err", contents: nil)
        process.standardOutput = FileHandle(forWritingAtPath: output + ".out")
        process.standardError = FileHandle(forWritingAtPath: output + ".err")
        let input = stdin.map { _ in Pipe() }
        process.standardInput = input ?? FileHandle.nullDevice
        guard FileManager.default.isExecutableFile(atPath: executable) else {
            throw FixtureError("\(executable) is missing: run .ci/install-dependencies")
        }
        try process.run()
        if let stdin, let input {
            input.fileHandleForWriting.write(Data(stdin.utf8))
            try input.fileHandleForWriting.close()
        }
        var deadline = ContinuousClock.now + .seconds(120)
        var terminated = false
        while process.isRunning {
            if ContinuousClock.now > deadline {
                // SIGTERM first; a client that outlives it (bubblewrap's outer process does not
                // pass it on) is killed, and a sandbox dies with it (--die-with-parent).
                if terminated {
                    kill(process.processIdentifier, SIGKILL)
                    break
                }
                process.terminate()
                terminated = true
                deadline = ContinuousClock.now + .seconds(5)
            }
            usleep(2_000)
        }
        process.waitUntilExit()
        defer {
            try? FileManager.default.removeItem(atPath: output + ".out")
            try? FileManager.default.removeItem(atPath: output + ".err")
        }
        return ClientRun(
            command: ([executable] + arguments).joined(separator: " "), status: process.terminationStatus,
            stdout: (try? String(contentsOfFile: output + ".out", encoding: .utf8)) ?? "",
            stderr: (try? String(contentsOfFile: output + ".err", encoding: .utf8)) ?? "")
    }

    func python(_ script: String, _ arguments: [String] = []) throws -> ClientRun {
        try run(Self.python, [Self.fixtures + "/" + script] + arguments)
    }

    /// Creates a collection through jeepney (CreateCollection, no alias) with `label` and the
    /// extra properties `properties` gives as Python dictionary entries; its object path.
    func createCollection(label: String, properties: String) throws -> String {
        let script = """
            from jeepney import DBusAddress, new_method_call
            from jeepney.io.blocking import open_dbus_connection
            connection = open_dbus_connection(bus='SESSION')
            service = DBusAddress('/org/freedesktop/secrets', bus_name='org.freedesktop.secrets',
                                  interface='org.freedesktop.Secret.Service')
            properties = {'org.freedesktop.Secret.Collection.Label': ('s', '\(label)'), \(properties)}
            reply = connection.send_and_get_reply(new_method_call(service, 'CreateCollection', 'a{sv}s', (properties, '')))
            print(reply.body[0])
            """
        let created = try run(Self.python, ["-c", script])
        let path = created.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        guard created.status == 0, path.hasPrefix("/org/freedesktop/secrets/collection/") else {
            throw FixtureError("CreateCollection failed: \(created)")
        }
        return path
    }

    func secretTool(_ arguments: [String], stdin: String? = nil) throws -> ClientRun {
        try run("/usr/bin/secret-tool", arguments, stdin: stdin)
    }

    func daemonLogs() -> String {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return names.filter { $0.hasSuffix(".log") }.sorted().map { name in
            "--- \(name)\n" + ((try? String(contentsOfFile: directory + "/" + name, encoding: .utf8)) ?? "")
        }.joined(separator: "\n")
    }

    // MARK: System services

    /// One of python-dbusmock's services (`fprintd` or `logind`, from Fixtures/<name>/) on the
    /// fixture's bus as its system bus, up once it owns its name.
    func startMock(_ name: String) throws -> DBusMock {
        let directory = Self.fixtures + "/../" + name
        let process = try Self.launch(
            Self.python, ["-m", "dbusmock", "--system", "-t", directory + "/\(name)_template.py"],
            environment: environment.merging(["DBUS_SYSTEM_BUS_ADDRESS": address]) { $1 },
            output: self.directory + "/\(name).log")
        let mock = DBusMock(fixture: self, process: process, control: directory + "/mockctl.py")
        do {
            _ = try mock.control(["wait", "30", String(process.processIdentifier)])
        } catch {
            mock.stop()
            throw error
        }
        return mock
    }

    /// A python-dbusmock service and its control script (mockctl.py).
    struct DBusMock {
        let fixture: SecretServiceFixture
        let process: Process
        let control: String

        /// Runs mockctl.py with `arguments`; its output, trimmed.
        func control(_ arguments: [String]) throws -> String {
            let run = try fixture.run(SecretServiceFixture.python, [control, fixture.address] + arguments)
            guard run.status == 0 else { throw FixtureError("\(run)") }
            return run.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        }

        func stop() {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    // MARK: Processes

    /// Starts a child; `stdin` is written to its standard input, which is then closed (else /dev/null).
    static func launch(
        _ executable: String, _ arguments: [String], environment: [String: String], output: String,
        stdin: String? = nil
    ) throws -> Process {
        guard FileManager.default.isExecutableFile(atPath: executable) else {
            throw FixtureError("\(executable) is missing: run .ci/install-dependencies")
        }
        _ = FileManager.default.createFile(atPath: output, contents: nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.environment = environment
        process.standardOutput = FileHandle(forWritingAtPath: output)
        process.standardError = FileHandle(forWritingAtPath: output)
        let input = stdin.map { _ in Pipe() }
        process.standardInput = input ?? FileHandle.nullDevice
        try process.run()
        if let stdin, let input {
            input.fileHandleForWriting.write(Data(stdin.utf8))
            try input.fileHandleForWriting.close()
        }
        return process
    }

    /// Polls `condition` until it holds; fails when `process` ends first, or after 60 s of no
    /// progress (a limit for a hung child, far above any healthy start).
    private func waitUntil(
        _ what: String, process: Process? = nil, log: String? = nil, _ condition: () -> Bool
    ) throws {
        let deadline = ContinuousClock.now + .seconds(60)
        while !condition() {
            if let process, !process.isRunning {
                let text = log.flatMap { try? String(contentsOfFile: $0, encoding: .utf8) } ?? ""
                throw FixtureError(
                    "waiting until \(what): the process ended with \(process.terminationStatus)\n\(text)")
            }
            guard ContinuousClock.now < deadline else { throw FixtureError("\(what): not within 60 s") }
            usleep(5_000)
        }
    }
}

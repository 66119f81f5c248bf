import Dispatch
import Foundation
import SystemCalls

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Why the mock could not be set up or driven. Every one fails the test: a missing dbus-daemon or
/// python3-dbusmock is a failure, not a skip.
struct FprintdMockError: Error, CustomStringConvertible {
    let description: String
}

/// A private dbus-daemon with python-dbusmock's fprintd (Fixtures/fprintd/fprintd_template.py) on
/// it, both children of this process in a private directory, killed by their own PIDs in ``stop()``.
final class FprintdMock: @unchecked Sendable {
    /// Debian's interpreter, not whatever `python3` is first on PATH: python3-dbusmock, python3-dbus
    /// and python3-gi are installed for it (/usr/lib/python3/dist-packages).
    static let python = "/usr/bin/python3"
    static let dbusDaemon = "/usr/bin/dbus-daemon"
    static let fixtures = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fixtures/fprintd")

    let directory: String
    let address: String
    private var children: [pid_t] = []

    /// Starts the bus and waits until it accepts connections; then, when `withService` is true,
    /// starts the fprintd mock and waits for it to own `net.reactivated.Fprint`.
    ///
    /// - Throws: `FprintdMockError` when dbus-daemon, python3 or python3-dbusmock is missing, or
    ///   the mock does not come up within 10 s.
    static func start(withService: Bool = true) async throws -> FprintdMock {
        var template = Array("/tmp/fprintd-tests-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw FprintdMockError(description: "mkdtemp: \(Errno.current)") }
        let mock = FprintdMock(directory: String(cString: made))
        do {
            try mock.startDaemon()
            try await mock.control(["wait-bus", "10"])
            if withService {
                let service = try mock.startService()
                try await mock.control(["wait", "10", String(service)])
            }
        } catch {
            let logs = mock.logs()
            mock.stop()
            throw FprintdMockError(description: "\(error)\n\(logs)")
        }
        return mock
    }

    private init(directory: String) {
        self.directory = directory
        address = "unix:path=\(directory)/bus"
    }

    deinit { stop() }

    /// Kills the children by PID, reaps them, and removes the directory. Idempotent.
    func stop() {
        Self.killAndReap(children.reversed())
        children = []
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Kills each child by its PID (SIGKILL) and reaps it.
    static func killAndReap(_ children: [pid_t]) {
        for pid in children {
            kill(pid, SIGKILL)
            var status: Int32 = 0
            _ = try? retryingInterrupts { waitpid(pid, &status, 0) }
        }
    }

    // MARK: Driving the mock

    /// Adds a reader; the first one added is fprintd's default device. Returns its object path.
    func addDevice(_ name: String = "Virtual fingerprint reader") async throws -> String {
        try await control(["add-device", name]).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func removeDevice(_ device: String) async throws {
        try await control(["remove-device", device])
    }

    func setEnrolledFingers(_ device: String, _ fingers: [String]) async throws {
        try await control(["set-fingers", device] + fingers)
    }

    /// What each VerifyStart emits: VerifyStatus(result, done) after `milliseconds`, in order.
    func setVerifyScript(_ device: String, _ steps: [(result: String, done: Bool, milliseconds: Int)]) async throws {
        let json = try JSONSerialization.data(
            withJSONObject: steps.map { [$0.result, $0.done, $0.milliseconds] as [Any] })
        try await control(["set-script", device, String(decoding: json, as: UTF8.self)])
    }

    /// Makes every later call of the device's `method` fail with the D-Bus error `name`.
    func setMethodError(_ device: String, method: String, name: String) async throws {
        try await control(["set-error", device, method, name])
    }

    /// fprintd (the mock, owner of its name) broadcasts VerifyStatus(result, done) now.
    func emitVerifyStatus(_ device: String, _ result: String, done: Bool) async throws {
        try await control(["emit", device, result, done ? "true" : "false"])
    }

    /// Another connection, owning no name, sends VerifyStatus(result, done) on the device's path,
    /// as any local user can: unicast to every other connection and broadcast. Returns once the
    /// bus has routed them all.
    func forgeVerifyStatus(_ device: String, _ result: String, done: Bool) async throws {
        try await control(["forge", device, result, done ? "true" : "false"])
    }

    /// The device's methods called so far, in order, with their string arguments.
    func calls(_ device: String) async throws -> [Call] {
        let output = try await control(["calls", device])
        guard let rows = try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [[Any]] else {
            throw FprintdMockError(description: "unreadable call log: \(output)")
        }
        return rows.map { row in
            Call(method: row.first as? String ?? "", arguments: (row.last as? [Any] ?? []).map { "\($0)" })
        }
    }

    /// Polls the call log until `method` was called, for at most 10 s.
    func waitForCall(_ method: String, on device: String) async throws {
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(10)
        while clock.now < deadline {
            if try await calls(device).contains(where: { $0.method == method }) { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw FprintdMockError(description: "\(method) was not called on \(device) within 10 s")
    }

    struct Call: Equatable, CustomStringConvertible {
        let method: String
        let arguments: [String]
        var description: String { "\(method)(\(arguments.map { "\"\($0)\"" }.joined(separator: ", ")))" }
    }

    /// The daemon's and the mock's output, for a failure message.
    func logs() -> String {
        ["dbus-daemon.log", "mock.log"].map { name in
            let text = (try? String(contentsOfFile: "\(directory)/\(name)", encoding: .utf8)) ?? "(none)"
            return "--- \(name)\n\(text)"
        }.joined(separator: "\n")
    }

    // MARK: Processes

    private func startDaemon() throws {
        let config = """
            <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
             "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
            <busconfig>
              <type>session</type>
              <listen>\(address)</listen>
              <auth>EXTERNAL</auth>
              <policy context="default">
                <allow send_destination="*" eavesdrop="true"/>
                <allow eavesdrop="true"/>
                <allow own="*"/>
              </policy>
            </busconfig>
            """
        try config.write(toFile: "\(directory)/bus.conf", atomically: true, encoding: .utf8)
        children.append(
            try Self.spawn(
                Self.dbusDaemon, ["--config-file=\(directory)/bus.conf", "--nofork", "--nopidfile", "--nosyslog"],
                environment: environment, standardOutput: "\(directory)/dbus-daemon.log"
            ))
    }

    /// Kills the fprintd mock and starts a new one, which owns `net.reactivated.Fprint` under a new
    /// unique name (as a restarted fprintd would). Its devices must be added again.
    func replaceService() async throws {
        guard let old = service else { throw FprintdMockError(description: "no fprintd mock is running") }
        kill(old, SIGKILL)
        var status: Int32 = 0
        _ = try? retryingInterrupts { waitpid(old, &status, 0) }
        children.removeAll { $0 == old }
        let replacement = try startService()
        try await control(["wait", "10", String(replacement)])
    }

    private var service: pid_t?

    private func startService() throws -> pid_t {
        let pid = try Self.spawn(
            Self.python,
            ["-m", "dbusmock", "--system", "-t", Self.fixtures.appendingPathComponent("fprintd_template.py").path],
            environment: environment, standardOutput: "\(directory)/mock.log"
        )
        children.append(pid)
        service = pid
        return pid
    }

    private var environment: [String] {
        ["PATH=/usr/bin:/bin", "DBUS_SYSTEM_BUS_ADDRESS=\(address)", "PYTHONDONTWRITEBYTECODE=1"]
    }

    /// Runs mockctl.py and returns its standard output.
    @discardableResult
    private func control(_ arguments: [String]) async throws -> String {
        try await Self.runControl(
            Self.fixtures.appendingPathComponent("mockctl.py"), address: address, arguments, environment: environment,
            directory: directory, label: "mockctl")
    }

    /// Runs a mock's control script (`<script> <bus address> <arguments>`) with Debian's python
    /// and returns its standard output; a failure carries its standard error.
    static func runControl(
        _ script: URL, address: String, _ arguments: [String], environment: [String], directory: String,
        label: String
    ) async throws -> String {
        let output = "\(directory)/\(label)-\(UUID().uuidString)"
        let pid = try spawn(
            python, [script.path, address] + arguments, environment: environment,
            standardOutput: output + ".out", standardError: output + ".err")
        defer {
            try? FileManager.default.removeItem(atPath: output + ".out")
            try? FileManager.default.removeItem(atPath: output + ".err")
        }
        // waitpid blocks: off the cooperative pool.
        let status: Int32 = await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                var status: Int32 = 0
                _ = try? retryingInterrupts { waitpid(pid, &status, 0) }
                continuation.resume(returning: status)
            }
        }
        let standardOutput = (try? String(contentsOfFile: output + ".out", encoding: .utf8)) ?? ""
        guard status == 0 else {
            let standardError = (try? String(contentsOfFile: output + ".err", encoding: .utf8)) ?? ""
            throw FprintdMockError(
                description: "\(label) \(arguments.joined(separator: " ")) failed (status \(status)): \(standardError)")
        }
        return standardOutput
    }

    /// posix_spawn with a clean signal mask and default dispositions (Swift Testing's workers may
    /// block signals, which children would inherit), stdin from /dev/null.
    static func spawn(
        _ executable: String, _ arguments: [String], environment: [String], standardOutput: String,
        standardError: String? = nil
    ) throws -> pid_t {
        guard access(executable, X_OK) == 0 else {
            throw FprintdMockError(description: "\(executable) is missing: \(Errno.current)")
        }
        var actions = posix_spawn_file_actions_t()
        try spawnResult { posix_spawn_file_actions_init(&actions) }
        defer { posix_spawn_file_actions_destroy(&actions) }
        try spawnResult { posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0) }
        try spawnResult {
            posix_spawn_file_actions_addopen(&actions, 1, standardOutput, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        }
        if let standardError {
            try spawnResult {
                posix_spawn_file_actions_addopen(&actions, 2, standardError, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
            }
        } else {
            try spawnResult { posix_spawn_file_actions_adddup2(&actions, 1, 2) }
        }
        // Parallel tests' TSS sockets lack CLOEXEC: a mock holding a copy would stall their swtpm.
        try closeInheritedDescriptors(&actions)
        var attributes = posix_spawnattr_t()
        try spawnResult { posix_spawnattr_init(&attributes) }
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t()
        sigemptyset(&empty)
        var all = sigset_t()
        sigfillset(&all)
        try spawnResult { posix_spawnattr_setsigmask(&attributes, &empty) }
        try spawnResult { posix_spawnattr_setsigdefault(&attributes, &all) }
        try spawnResult { posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF)) }

        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup($0) } + [nil]
        defer {
            for pointer in argv { free(pointer) }
            for pointer in envp { free(pointer) }
        }
        var pid: pid_t = 0
        try spawnResult { posix_spawn(&pid, executable, &actions, &attributes, argv, envp) }
        return pid
    }
}

import Foundation
import SystemCalls

#if canImport(Glibc)
import Glibc
#endif

/// Debian's real fprintd on a private bus, with libfprint's virtual reader (the `virtual_device`
/// driver: a Unix socket that takes "SCAN <id>", "UNPLUG", ...) and python-dbusmock's polkitd
/// allowing every action, as fprintd's own test suite runs it. Prints are kept in a private state
/// directory. Every process is a child of this one, killed by its PID in ``stop()``; a missing
/// fprintd, dbus-daemon or python3-dbusmock fails the test.
final class RealFprintd: @unchecked Sendable {
    static let fprintd = "/usr/libexec/fprintd"
    static let control = FprintdMock.fixtures.appendingPathComponent("realctl.py")
    /// How long a touch waits for the reader to need a finger, in seconds: a bound on failure
    /// only (the touch goes as soon as the verification waits), generous because on a loaded
    /// two-core machine the verifying task may wait long for a thread.
    static let patience = "120"

    let directory: String
    let address: String
    /// The virtual reader's socket.
    var readerSocket: String { directory + "/reader.sock" }
    /// fprintd's print store: `<state>/<user>/virtual_device/0/<finger number>`.
    var stateDirectory: String { directory + "/state" }
    private var children: [pid_t] = []

    static func start() async throws -> RealFprintd {
        var template = Array("/tmp/real-fprintd-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw FprintdMockError(description: "mkdtemp: \(Errno.current)") }
        let real = RealFprintd(directory: String(cString: made))
        do {
            try real.startBus()
            try await real.run(["wait-bus", "60"], script: FprintdMock.fixtures.appendingPathComponent("mockctl.py"))
            real.children.append(
                try FprintdMock.spawn(
                    FprintdMock.python, ["-m", "dbusmock", "--system", "--template", "polkitd"],
                    environment: real.environment, standardOutput: real.directory + "/polkitd.log"))
            try await real.run(["allow-polkit", "60"])
            try FileManager.default.createDirectory(atPath: real.stateDirectory, withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: real.directory + "/run", withIntermediateDirectories: true)
            real.children.append(
                try FprintdMock.spawn(
                    fprintd, ["-t"],
                    environment: real.environment + [
                        "FP_VIRTUAL_DEVICE=\(real.readerSocket)", "FP_DRIVERS_WHITELIST=virtual_device",
                        "FP_DRIVERS_ALLOWLIST=virtual_device", "STATE_DIRECTORY=\(real.stateDirectory)",
                        "RUNTIME_DIRECTORY=\(real.directory)/run",
                    ], standardOutput: real.directory + "/fprintd.log"))
            try await real.run(["wait", "60"])
        } catch {
            let logs = real.logs()
            real.stop()
            throw FprintdMockError(description: "\(error)\n\(logs)")
        }
        return real
    }

    private init(directory: String) {
        self.directory = directory
        address = "unix:path=\(directory)/bus"
    }

    deinit { stop() }

    func stop() {
        FprintdMock.killAndReap(children.reversed())
        children = []
        try? FileManager.default.removeItem(atPath: directory)
    }

    // MARK: The virtual finger

    /// Enrolls `finger` (fprintd's name, such as "right-index-finger") with the virtual finger
    /// `identity`: what a person's finger is to a real reader.
    func enroll(_ finger: String, identity: String) async throws {
        try await run(["enroll", readerSocket, finger, identity])
    }

    /// Makes polkit refuse every action from now on, as a session that is not active would.
    func denyPolkit() async throws {
        try await run(["deny-polkit"])
    }

    /// Deletes this user's prints.
    func deletePrints() async throws {
        try await run(["delete"])
    }

    /// Once a verification waits for a finger, touches the reader with `identity`.
    func touch(_ identity: String) async throws {
        try await run(["touch", readerSocket, "SCAN \(identity)", Self.patience])
    }

    /// Once a verification waits for a finger, unplugs the reader.
    func unplugWhileVerifying() async throws {
        try await run(["touch", readerSocket, "UNPLUG", Self.patience])
    }

    func logs() -> String {
        ["dbus-daemon.log", "polkitd.log", "fprintd.log"].map { name in
            let text = (try? String(contentsOfFile: "\(directory)/\(name)", encoding: .utf8)) ?? "(none)"
            return "--- \(name)\n\(text.suffix(4000))"
        }.joined(separator: "\n")
    }

    // MARK: Processes

    private var environment: [String] {
        ["PATH=/usr/bin:/bin", "DBUS_SYSTEM_BUS_ADDRESS=\(address)", "PYTHONDONTWRITEBYTECODE=1"]
    }

    private func startBus() throws {
        let config = """
            <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
             "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
            <busconfig>
              <type>system</type>
              <listen>\(address)</listen>
              <auth>EXTERNAL</auth>
              <policy context="default">
                <allow user="*"/>
                <allow own="*"/>
                <allow send_destination="*"/>
                <allow receive_sender="*"/>
              </policy>
            </busconfig>
            """
        try config.write(toFile: "\(directory)/bus.conf", atomically: true, encoding: .utf8)
        children.append(
            try FprintdMock.spawn(
                FprintdMock.dbusDaemon,
                ["--config-file=\(directory)/bus.conf", "--nofork", "--nopidfile", "--nosyslog"],
                environment: environment, standardOutput: "\(directory)/dbus-daemon.log"))
    }

    @discardableResult
    private func run(_ arguments: [String], script: URL = RealFprintd.control) async throws -> String {
        try await FprintdMock.runControl(
            script, address: address, arguments, environment: environment, directory: directory, label: "realctl")
    }
}

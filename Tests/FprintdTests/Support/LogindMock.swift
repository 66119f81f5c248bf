import Dispatch
import Foundation
import SystemCalls

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// python-dbusmock's logind, extended by Fixtures/logind/logind_template.py, on a private
/// dbus-daemon (a bare ``FprintdMock``): both children of this process, killed by their own PIDs.
/// A missing dbus-daemon or python3-dbusmock is a failure, not a skip.
final class LogindMock: @unchecked Sendable {
    static let fixtures = FprintdMock.fixtures.deletingLastPathComponent().appendingPathComponent("logind")

    /// The private bus; ``killBus()`` ends it.
    let bus: FprintdMock
    var address: String { bus.address }
    private var service: pid_t?

    /// Starts the bus and, when `withService` is true, the logind mock, and waits for it to own
    /// `org.freedesktop.login1`.
    static func start(withService: Bool = true) async throws -> LogindMock {
        let mock = LogindMock(bus: try await FprintdMock.start(withService: false))
        if withService {
            do {
                try await mock.startService()
            } catch {
                mock.stop()
                throw error
            }
        }
        return mock
    }

    private init(bus: FprintdMock) { self.bus = bus }

    deinit { stop() }

    /// Starts (or, after ``killService()``, restarts with no sessions) the logind mock.
    func startService() async throws {
        let pid = try FprintdMock.spawn(
            FprintdMock.python,
            ["-m", "dbusmock", "--system", "-t", Self.fixtures.appendingPathComponent("logind_template.py").path],
            environment: environment, standardOutput: "\(bus.directory)/logind.log"
        )
        service = pid
        do {
            try await control(["wait", "10", String(pid)])
        } catch {
            let log = (try? String(contentsOfFile: "\(bus.directory)/logind.log", encoding: .utf8)) ?? "(none)"
            throw FprintdMockError(description: "\(error)\n--- logind.log\n\(log)")
        }
    }

    /// Kills the logind mock: logind leaves the bus, the bus stays.
    func killService() {
        guard let pid = service else { return }
        kill(pid, SIGKILL)
        var status: Int32 = 0
        _ = try? retryingInterrupts { waitpid(pid, &status, 0) }
        service = nil
    }

    /// Kills the dbus-daemon (and the logind mock): every connection to the bus fails.
    func killBus() {
        killService()
        bus.stop()
    }

    func stop() { killBus() }

    // MARK: Driving the mock

    /// An active session of `uid` on seat0 (LockedHint false); returns its object path.
    @discardableResult
    func addSession(_ id: String, uid: uid_t = getuid()) async throws -> String {
        try await control(["add-session", id, String(uid), "tester"]).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Session.SetLockedHint, as a screen locker calls it; logind's PropertiesChanged follows.
    func setLockedHint(_ id: String, _ locked: Bool) async throws {
        try await control(["set-locked-hint", id, locked ? "true" : "false"])
    }

    /// logind's Lock signal on the session (`loginctl lock-session`).
    func lock(_ id: String) async throws { try await control(["lock", id]) }

    /// logind's Unlock signal on the session (`loginctl unlock-session`).
    func unlock(_ id: String) async throws { try await control(["unlock", id]) }

    /// Another connection, owning nothing, sends this process's connections what would unlock
    /// session `id` (PropertiesChanged with LockedHint false, and Unlock), unicast, as any local
    /// user can; returns once they have handled them (a Peer.Ping after the signals was answered).
    func forgeUnlock(_ id: String) async throws {
        try await control(["forge-unlock", id, String(getpid())])
    }

    func setSession(forPID pid: pid_t, _ id: String) async throws {
        try await control(["set-pid-session", String(pid), id])
    }

    /// The user's display session; "" for none.
    func setDisplay(uid: uid_t = getuid(), _ id: String) async throws {
        try await control(["set-display", String(uid), id])
    }

    /// Removes the session; logind's SessionRemoved follows.
    func removeSession(_ id: String) async throws { try await control(["remove-session", id]) }

    /// Emits Manager.PrepareForSleep: true as logind does before a suspend, false after the wake.
    func prepareForSleep(_ starting: Bool) async throws {
        try await control(["prepare-for-sleep", starting ? "true" : "false"])
    }

    /// The inhibitors held now, as `what:who:mode` (Manager.ListInhibitors).
    func inhibitors() async throws -> [String] {
        try await control(["inhibitors"]).split(separator: "\n").map(String.init)
    }

    /// How many connections process `pid` has on the bus.
    func connections(of pid: pid_t = getpid()) async throws -> Int {
        let output = try await control(["connections", String(pid)]).trimmingCharacters(in: .whitespacesAndNewlines)
        guard let count = Int(output) else {
            throw FprintdMockError(description: "unreadable connection count: \(output)")
        }
        return count
    }

    // MARK: Processes

    private var environment: [String] {
        ["PATH=/usr/bin:/bin", "DBUS_SYSTEM_BUS_ADDRESS=\(address)", "PYTHONDONTWRITEBYTECODE=1"]
    }

    /// Runs Fixtures/logind/mockctl.py and returns its standard output.
    @discardableResult
    private func control(_ arguments: [String]) async throws -> String {
        try await FprintdMock.runControl(
            Self.fixtures.appendingPathComponent("mockctl.py"), address: address, arguments,
            environment: environment, directory: bus.directory, label: "logind mockctl")
    }
}

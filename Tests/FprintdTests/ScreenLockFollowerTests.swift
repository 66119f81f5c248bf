import Foundation
import SystemCalls
import TPM
import TPMKeychain
import TPMKeychainFprintd
import TPMKeychainTesting
import Testing

/// ScreenLockFollower: a logind mock's screen lock moves the device's lock state in a real swtpm.
@Suite(.serialized)
struct ScreenLockFollowerTests {
    static let passcode = SecretBytes(copying: Array("screen lock passcode".utf8))

    @Test(
        "Each time the session's screen locks, the keychain is locked in the TPM (a session locked at start is left alone); the follower ends when the session does"
    )
    func screenLockLocksTheKeychain() async throws {
        try await Self.followingSession { session in
            let (mock, device, sessionLock) = (session.mock, session.device, session.sessionLock)
            #expect(try device.status().unlocked == true)

            let stop = Locked(false)
            let locks = Locked(0)
            let ended = Locked<String?>(nil)
            let follower = try JoinableThread {
                let reason = ScreenLockFollower.run(
                    sessionLock: sessionLock, lockKeychain: { try device.lock() }, pollInterval: .milliseconds(20),
                    shouldStop: { stop.withLock { $0 } },
                    onLock: { if case .success = $0 { locks.withLock { $0 += 1 } } })
                ended.withLock { $0 = reason.map { "\($0)" } ?? "stopped" }
            }
            defer {
                stop.withLock { $0 = true }
                follower.join()
            }

            try await mock.setLockedHint("c1", true)
            try await Self.eventually("the keychain is locked") { try device.status().unlocked == false }
            #expect(locks.withLock { $0 } == 1)

            // Unlocked again with the passcode (the screen locker's PAM hook); the next lock locks again.
            try device.unlock(passcode: Self.passcode)
            try await mock.setLockedHint("c1", false)
            try await Self.eventually("the unlock is seen") { try !sessionLock.isLocked() }
            #expect(try device.status().unlocked == true)
            try await mock.setLockedHint("c1", true)
            try await Self.eventually("the keychain is locked again") { try device.status().unlocked == false }

            try await mock.removeSession("c1")
            try await Self.eventually("the follower ends with the session") { ended.withLock { $0 } != nil }
            #expect(ended.withLock { $0 } != "stopped")
        }
    }

    /// What ``followingSession(_:)`` sets up for a test.
    struct Following {
        let mock: LogindMock
        let device: KeychainDevice
        let sessionLock: LogindSessionLock
        /// The device's TPM and directory, for a process of its own.
        let tcti: String
        let deviceDirectory: String
    }

    /// Runs `body` with a logind mock whose session `c1` a LogindSessionLock follows, and a device
    /// with a passcode, unlocked, on a real swtpm; all stopped and removed afterwards.
    static func followingSession(_ body: (Following) async throws -> Void) async throws {
        let mock = try await LogindMock.start()
        defer { mock.stop() }
        let simulator = try SoftwareTPM.start()
        defer { simulator.stop() }
        let directory = NSTemporaryDirectory() + "screen-lock-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let device = try unlockedDevice(simulator: simulator, directory: directory)
        try await mock.addSession("c1")
        let sessionLock = try LogindSessionLock(busAddress: mock.address, session: "c1")
        defer { sessionLock.stop() }
        try await body(
            Following(
                mock: mock, device: device, sessionLock: sessionLock, tcti: simulator.tcti,
                deviceDirectory: directory + "/device"))
    }

    /// A device with a passcode, unlocked, on a real swtpm.
    static func unlockedDevice(
        simulator: SoftwareTPM, directory: String
    ) throws -> KeychainDevice {
        var location = try KeychainLocation(path: directory + "/store", tcti: simulator.tcti)
        location.deviceDirectory = directory + "/device"
        let device = KeychainDevice(location: location)
        try device.setPasscode(Self.passcode)
        try device.unlock(passcode: Self.passcode)
        return device
    }

    /// Lets the follower look at the session only when the test says: a look is taken once per
    /// ``allowLook()``, so what happens between two looks does not depend on the machine's speed.
    final class GatedSessionLock: SessionLockState {
        let inner: LogindSessionLock
        private let allowed = Locked(1)
        private let taken = Locked(0)
        init(_ inner: LogindSessionLock) { self.inner = inner }

        func allowLook() { allowed.withLock { $0 += 1 } }
        var looksTaken: Int { taken.withLock { $0 } }

        func isLocked() throws -> Bool {
            while taken.withLock({ $0 }) >= allowed.withLock({ $0 }) { usleep(1_000) }
            taken.withLock { $0 += 1 }
            return try inner.isLocked()
        }

        func timesLocked() throws -> UInt64? { try inner.timesLocked() }
    }

    @Test(
        "A screen lock undone before the follower looks again still locks the keychain (logind's signals are counted as they arrive)"
    )
    func shortLockIsSeen() async throws {
        try await Self.followingSession { session in
            let (mock, device, sessionLock) = (session.mock, session.device, session.sessionLock)
            let gated = GatedSessionLock(sessionLock)
            let stop = Locked(false)
            let follower = try JoinableThread {
                _ = ScreenLockFollower.run(
                    sessionLock: gated, lockKeychain: { try device.lock() }, pollInterval: .milliseconds(1),
                    shouldStop: { stop.withLock { $0 } })
            }
            defer {
                stop.withLock { $0 = true }
                gated.allowLook()
                follower.join()
            }
            try await Self.eventually("the follower's first look") { gated.looksTaken == 1 }

            // Locked and unlocked between two looks.
            try await mock.setLockedHint("c1", true)
            try await mock.setLockedHint("c1", false)
            try await Self.eventually("both signals are in") {
                try sessionLock.timesLocked() == 1 && !sessionLock.isLocked()
            }
            #expect(try device.status().unlocked == true)
            gated.allowLook()
            try await Self.eventually("the keychain is locked") { try device.status().unlocked == false }
        }
    }

    @Test(
        "When logind leaves the bus, the follower locks the keychain before it stops (fail closed), and says why"
    )
    func logindGoneLocks() async throws {
        try await Self.followingSession { session in
            let (mock, device, sessionLock) = (session.mock, session.device, session.sessionLock)
            let ended = Locked<String?>(nil)
            let follower = try JoinableThread {
                let reason = ScreenLockFollower.run(
                    sessionLock: sessionLock, lockKeychain: { try device.lock() }, pollInterval: .milliseconds(10))
                ended.withLock { $0 = reason.map { "\($0)" } ?? "stopped" }
            }
            defer { follower.join() }
            #expect(try device.status().unlocked == true)

            mock.killService()
            try await Self.eventually("the follower stops") { ended.withLock { $0 } != nil }
            #expect(try device.status().unlocked == false)
            #expect(ended.withLock { $0 }?.contains("left the bus") == true, "\(ended.withLock { $0 } ?? "")")
        }
    }

    @Test(
        "tpm-keychain follow-screen-lock locks the keychain when logind leaves the bus, and exits 69 for its unit to start it again"
    )
    func commandFailsClosed() async throws {
        try await Self.followingSession { session in
            let bundle =
                (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
                ?? CommandLine.arguments[0]
            let tool = URL(fileURLWithPath: bundle).deletingLastPathComponent().appendingPathComponent("tpm-keychain")
                .path
            let output = session.deviceDirectory + "-follower.log"
            defer { unlink(output) }
            let pid = try FprintdMock.spawn(
                tool, ["follow-screen-lock", "--keychain", session.deviceDirectory + "-store"],
                environment: [
                    "DBUS_SYSTEM_BUS_ADDRESS=\(session.mock.address)", "XDG_SESSION_ID=c1",
                    "TPM_KEYCHAIN_TCTI=\(session.tcti)", "TPM_KEYCHAIN_DEVICE_DIR=\(session.deviceDirectory)",
                    "HOME=\(session.deviceDirectory)", "PATH=/usr/bin:/bin",
                ], standardOutput: output)
            var status: Int32 = 0
            defer {
                if kill(pid, 0) == 0 {
                    kill(pid, SIGKILL)
                    _ = waitpid(pid, &status, 0)
                }
            }
            func log() -> String { (try? String(contentsOfFile: output, encoding: .utf8)) ?? "" }
            try await Self.eventually("the command follows the session") { log().contains("following") }
            #expect(try session.device.status().unlocked == true)

            session.mock.killService()
            try await Self.eventually("the command ends") { waitpid(pid, &status, WNOHANG) == pid }
            #expect(status >> 8 & 0xFF == 69, "exit status \(status)\n\(log())")
            #expect(try session.device.status().unlocked == false, "\(log())")
        }
    }

    /// Waits for `condition`, driven by what is observed; the limit only bounds a failure.
    static func eventually(_ what: String, _ condition: () throws -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            if (try? condition()) == true { return }
            try await Task.sleep(for: .milliseconds(10))
        }
        Issue.record("timed out waiting until \(what)")
    }
}

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
        let mock = try await LogindMock.start()
        defer { mock.stop() }
        let simulator = try SoftwareTPM.start()
        defer { simulator.stop() }
        let directory = NSTemporaryDirectory() + "screen-lock-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var location = try KeychainLocation(path: directory + "/store", tcti: simulator.tcti)
        location.deviceDirectory = directory + "/device"
        let device = KeychainDevice(location: location)
        try device.setPasscode(Self.passcode)
        try device.unlock(passcode: Self.passcode)
        #expect(try device.status().unlocked == true)

        try await mock.addSession("c1")
        let sessionLock = try LogindSessionLock(busAddress: mock.address, session: "c1")
        defer { sessionLock.stop() }
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

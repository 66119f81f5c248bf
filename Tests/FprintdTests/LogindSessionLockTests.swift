import Foundation
import TPMKeychain
import TPMKeychainTesting
import Testing

@testable import TPMKeychainFprintd

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// LogindSessionLock against python-dbusmock's logind (Fixtures/logind/logind_template.py) on a
/// private dbus-daemon that each test starts and kills. Serialized: two cores, and the waits for
/// notifications should not compete.
@Suite(.serialized)
struct LogindSessionLockTests {
    static let sessionPrefix = "/org/freedesktop/login1/session/"

    // MARK: Following LockedHint

    @Test func followsLockedHint() async throws {
        try await withMock { mock in
            try await mock.addSession("c1")
            let lock = try LogindSessionLock(busAddress: mock.address, session: "c1")
            defer { lock.stop() }
            #expect(lock.sessionPath == Self.sessionPrefix + "c1")
            #expect(try lock.isLocked() == false)

            try await mock.setLockedHint("c1", true)
            try await expectEventually("LockedHint true is seen") { try lock.isLocked() }
            try await mock.setLockedHint("c1", false)
            try await expectEventually("LockedHint false is seen") { try !lock.isLocked() }
            try await mock.setLockedHint("c1", true)
            try await expectEventually("LockedHint true is seen again") { try lock.isLocked() }
        }
    }

    @Test func readsTheHintAtStart() async throws {
        try await withMock { mock in
            try await mock.addSession("c1")
            try await mock.setLockedHint("c1", true)
            let lock = try LogindSessionLock(busAddress: mock.address, session: "c1")
            defer { lock.stop() }
            #expect(try lock.isLocked() == true, "a session locked before the lock started")
        }
    }

    @Test func followsOnlyItsOwnSession() async throws {
        try await withMock { mock in
            try await mock.addSession("mine")
            try await mock.addSession("other")
            let lock = try LogindSessionLock(busAddress: mock.address, session: "mine")
            defer { lock.stop() }
            try await mock.setLockedHint("other", true)
            // A change of the followed session after it proves the other one's was processed.
            try await mock.setLockedHint("mine", true)
            try await expectEventually("the followed session's change is seen") { try lock.isLocked() }
            try await mock.setLockedHint("mine", false)
            try await expectEventually("another session's LockedHint is not ours") { try !lock.isLocked() }
        }
    }

    /// Lock and Unlock are requests to the screen locker: Lock counts as locked until the locker
    /// answers with LockedHint, and Unlock never unlocks while LockedHint is true.
    @Test func lockAndUnlockRequests() async throws {
        try await withMock { mock in
            try await mock.addSession("c1")
            let lock = try LogindSessionLock(busAddress: mock.address, session: "c1")
            defer { lock.stop() }

            // No locker: Lock alone locks, Unlock alone unlocks.
            try await mock.lock("c1")
            try await expectEventually("a Lock request counts as locked") { try lock.isLocked() }
            try await mock.unlock("c1")
            try await expectEventually("an Unlock request ends it") { try !lock.isLocked() }

            // A locker: Lock, then LockedHint true; the person unlocks, LockedHint false.
            try await mock.lock("c1")
            try await mock.setLockedHint("c1", true)
            try await expectEventually("locked") { try lock.isLocked() }
            try await mock.setLockedHint("c1", false)
            try await expectEventually("LockedHint false after a Lock request unlocks") { try !lock.isLocked() }

            // Unlock while the locker still says locked: still locked. (Nothing observable follows
            // an Unlock that is ignored, so this waits well past the time a signal takes.)
            try await mock.setLockedHint("c1", true)
            try await expectEventually("locked") { try lock.isLocked() }
            try await mock.unlock("c1")
            try await Task.sleep(for: .milliseconds(300))
            #expect(try lock.isLocked() == true, "Unlock must not override LockedHint true")
        }
    }

    @Test("signals forged by another connection (unicast PropertiesChanged and Unlock) do not unlock a locked session")
    func forgedUnlockIsIgnored() async throws {
        try await withMock { mock in
            try await mock.addSession("c1")
            try await mock.setLockedHint("c1", true)
            let lock = try LogindSessionLock(busAddress: mock.address, session: "c1")
            defer { lock.stop() }
            try await expectEventually("locked") { try lock.isLocked() }
            try await mock.forgeUnlock("c1")
            #expect(try lock.isLocked() == true, "a forged signal unlocked the session")
            // logind's own notification still counts.
            try await mock.setLockedHint("c1", false)
            try await expectEventually("unlocked by logind") { try !lock.isLocked() }
        }
    }

    // MARK: Finding the session

    @Test func findsTheSessionOfThisProcess() async throws {
        try await withMock { mock in
            try await mock.addSession("decoy")
            try await mock.addSession("bypid")
            try await mock.setLockedHint("bypid", true)
            try await mock.setSession(forPID: getpid(), "bypid")
            // The public initialiser: GetSessionByPID comes first, whatever $XDG_SESSION_ID says.
            let lock = try LogindSessionLock(busAddress: mock.address)
            defer { lock.stop() }
            #expect(lock.sessionPath == Self.sessionPrefix + "bypid")
            #expect(try lock.isLocked() == true)
        }
    }

    @Test func fallsBackToXDGSessionID() async throws {
        try await withMock { mock in
            try await mock.addSession("fromenv")
            try await mock.addSession("display")
            try await mock.setDisplay("display")
            let lock = try LogindSessionLock(
                busAddress: mock.address, session: nil, timeout: .seconds(5), environmentSessionID: "fromenv")
            defer { lock.stop() }
            #expect(lock.sessionPath == Self.sessionPrefix + "fromenv")
        }
    }

    @Test func fallsBackToTheDisplaySession() async throws {
        try await withMock { mock in
            try await mock.addSession("display")
            try await mock.addSession("tty")
            try await mock.setDisplay("display")
            for variable: String? in [nil, "", "stale"] {
                let lock = try LogindSessionLock(
                    busAddress: mock.address, session: nil, timeout: .seconds(5), environmentSessionID: variable)
                #expect(lock.sessionPath == Self.sessionPrefix + "display", "XDG_SESSION_ID \(variable ?? "unset")")
                lock.stop()
            }
        }
    }

    @Test func noSessionAtAll() async throws {
        try await withMock { mock in
            // Not logged in at all: GetUser fails.
            expectLockError(.noSession) {
                _ = try LogindSessionLock(
                    busAddress: mock.address, session: nil, timeout: .seconds(5), environmentSessionID: nil)
            }
            // Logged in, but without a display session.
            try await mock.addSession("tty")
            expectLockError(.noSession) {
                _ = try LogindSessionLock(
                    busAddress: mock.address, session: nil, timeout: .seconds(5), environmentSessionID: "stale")
            }
            expectLockError(.noSession) { _ = try LogindSessionLock(busAddress: mock.address, session: "nonexistent") }
        }
    }

    // MARK: When the state cannot be known

    @Test func noLogindOnTheBus() async throws {
        let mock = try await LogindMock.start(withService: false)
        defer { mock.stop() }
        expectLockError(.logindUnavailable) { _ = try LogindSessionLock(busAddress: mock.address, session: "c1") }
        expectLockError(.logindUnavailable) { _ = try LogindSessionLock(busAddress: mock.address) }
    }

    @Test func noBus() throws {
        let directory = NSTemporaryDirectory() + "logind-no-bus-" + UUID().uuidString
        expectLockError(.busUnavailable) {
            _ = try LogindSessionLock(busAddress: "unix:path=\(directory)/bus", session: "c1")
        }
    }

    @Test func busDyingMakesTheStateUnknown() async throws {
        try await withMock { mock in
            try await mock.addSession("c1")
            let lock = try LogindSessionLock(busAddress: mock.address, session: "c1")
            defer { lock.stop() }
            #expect(try lock.isLocked() == false)
            mock.killBus()
            try await expectLockErrorEventually(.connectionLost, lock)
        }
    }

    @Test func logindLeavingAndComingBack() async throws {
        try await withMock { mock in
            try await mock.addSession("c1")
            let lock = try LogindSessionLock(busAddress: mock.address, session: "c1")
            defer { lock.stop() }
            mock.killService()
            try await expectLockErrorEventually(.logindUnavailable, lock)

            // A logind that does not know the session: still unknown, now for that reason.
            try await mock.startService()
            try await expectLockErrorEventually(.noSession, lock)
            // Once the session is there and announces its hint, it is followed again.
            try await mock.addSession("c1")
            try await mock.setLockedHint("c1", true)
            try await expectEventually("followed again after logind came back") { try lock.isLocked() }
            try await mock.setLockedHint("c1", false)
            try await expectEventually("unlocked") { try !lock.isLocked() }
        }
    }

    @Test func sessionEnding() async throws {
        try await withMock { mock in
            try await mock.addSession("c1")
            let lock = try LogindSessionLock(busAddress: mock.address, session: "c1")
            defer { lock.stop() }
            try await mock.removeSession("c1")
            try await expectLockErrorEventually(.noSession, lock)
        }
    }

    // MARK: Stopping

    @Test func stopClosesTheConnection() async throws {
        try await withMock { mock in
            try await mock.addSession("c1")
            let lock = try LogindSessionLock(busAddress: mock.address, session: "c1")
            #expect(try await mock.connections() == 1)
            lock.stop()
            expectLockError(.stopped) { _ = try lock.isLocked() }
            lock.stop()
            expectLockError(.stopped) { _ = try lock.isLocked() }
            try await expectEventuallyAsync("the connection is closed") { try await mock.connections() == 0 }

            // Released without stop(): deinit stops it.
            var released: LogindSessionLock? = try LogindSessionLock(busAddress: mock.address, session: "c1")
            #expect(try await mock.connections() == 1)
            #expect(try released?.isLocked() == false)
            released = nil
            try await expectEventuallyAsync("deinit closed the connection") { try await mock.connections() == 0 }
        }
    }

    // MARK: A keychain on the lock

    @Test func keychainRefusesWhenUnlockedItemsWhileLocked() async throws {
        try await withMock { mock in
            try await mock.addSession("c1")
            let lock = try LogindSessionLock(busAddress: mock.address, session: "c1")
            defer { lock.stop() }

            let directory = NSTemporaryDirectory() + "logind-keychain-" + UUID().uuidString
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let simulator = try SoftwareTPM.start()
            defer { simulator.stop() }
            var location = try KeychainLocation(path: directory + "/store", tcti: simulator.tcti)
            location.deviceDirectory = directory + "/device"
            location.sessionLock = lock
            defer { Keychain.closeStore(location) }
            // Lock states count only where a device passcode is set: without one the device is
            // always unlocked (as an iPhone without a passcode), and whenUnlocked items stay under
            // the store's master key, readable whatever the session says.
            try KeychainDevice(location: location).setPasscode(.init(copying: Array("correct horse 4711".utf8)))

            let keychain = try Keychain(service: "com.example.logind", location: location)
            try await keychain.set("v", forKey: "k", accessControl: try AccessControl(.whenUnlocked))
            try await keychain.set("a", forKey: "always", accessControl: try AccessControl(.alwaysThisDeviceOnly))
            #expect(try keychain.get("k", as: String.self) == "v")

            try await mock.setLockedHint("c1", true)
            try await expectEventually("locked") { try lock.isLocked() }
            do throws(KeychainError) {
                _ = try keychain.get("k", as: String.self)
                Issue.record("a whenUnlocked item was read while logind said locked")
            } catch {
                #expect(error.code == .interactionNotAllowed, "got \(error)")
            }
            #expect(try keychain.get("always", as: String.self) == "a", "only whenUnlocked items wait for the session")

            try await mock.setLockedHint("c1", false)
            try await expectEventually("unlocked") { try !lock.isLocked() }
            #expect(try keychain.get("k", as: String.self) == "v")

            // A state that cannot be known counts as locked.
            mock.killService()
            try await expectLockErrorEventually(.logindUnavailable, lock)
            do throws(KeychainError) {
                _ = try keychain.get("k", as: String.self)
                Issue.record("a whenUnlocked item was read while the session's state was unknown")
            } catch {
                #expect(error.code == .interactionNotAllowed, "got \(error)")
            }
        }
    }

    // MARK: Helpers

    private func withMock(_ body: (LogindMock) async throws -> Void) async throws {
        let mock = try await LogindMock.start()
        defer { mock.stop() }
        do {
            try await body(mock)
        } catch {
            Issue.record("\(error)\n\(mock.bus.logs())")
            throw error
        }
    }
}

/// The code ``LogindSessionLock/isLocked()`` throws; nil when it answers.
private func lockError(of lock: LogindSessionLock) -> LogindSessionLockError.Code? {
    do {
        _ = try lock.isLocked()
        return nil
    } catch {
        return error.code
    }
}

private func expectLockError(
    _ code: LogindSessionLockError.Code, sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () throws -> Void
) {
    do {
        try body()
        Issue.record("expected LogindSessionLockError.\(code), but nothing was thrown", sourceLocation: sourceLocation)
    } catch let error as LogindSessionLockError {
        #expect(error.code == code, "got \(error)", sourceLocation: sourceLocation)
    } catch {
        Issue.record("expected LogindSessionLockError.\(code), got \(error)", sourceLocation: sourceLocation)
    }
}

/// Polls ``LogindSessionLock/isLocked()`` every 20 ms until it throws `code`, for at most `limit`.
private func expectLockErrorEventually(
    _ code: LogindSessionLockError.Code, _ lock: LogindSessionLock, within limit: Duration = .seconds(2),
    sourceLocation: SourceLocation = #_sourceLocation
) async throws {
    let clock = ContinuousClock()
    let deadline = clock.now + limit
    var last = "was not called"
    while clock.now < deadline {
        do {
            last = "answered \(try lock.isLocked())"
        } catch {
            if error.code == code { return }
            last = "threw \(error)"
        }
        try await Task.sleep(for: .milliseconds(20))
    }
    Issue.record("isLocked() did not throw \(code) within \(limit); last it \(last)", sourceLocation: sourceLocation)
}

/// Polls `condition` every 20 ms until it holds, for at most `limit` (notifications cross two
/// processes and a bus; the wait is bounded, so a notification that never arrives fails).
private func expectEventually(
    _ what: String, within limit: Duration = .seconds(2), sourceLocation: SourceLocation = #_sourceLocation,
    _ condition: () throws -> Bool
) async throws {
    try await expectEventuallyAsync(what, within: limit, sourceLocation: sourceLocation) { try condition() }
}

private func expectEventuallyAsync(
    _ what: String, within limit: Duration = .seconds(2), sourceLocation: SourceLocation = #_sourceLocation,
    _ condition: () async throws -> Bool
) async throws {
    let clock = ContinuousClock()
    let deadline = clock.now + limit
    var last: (any Error)?
    while clock.now < deadline {
        do {
            if try await condition() { return }
            last = nil
        } catch {
            last = error
        }
        try await Task.sleep(for: .milliseconds(20))
    }
    Issue.record(
        "not within \(limit): \(what)\(last.map { " (last error: \($0))" } ?? "")", sourceLocation: sourceLocation)
}

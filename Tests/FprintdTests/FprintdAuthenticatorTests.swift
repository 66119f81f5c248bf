import Crypto
import Foundation
import TPMKeychain
import TPMKeychainFprintd
import Testing

/// FprintdAuthenticator against python-dbusmock's fprintd (Fixtures/fprintd/fprintd_template.py)
/// on a private dbus-daemon that each test starts and kills. Serialized: two cores, and the
/// timing tests should not compete.
@Suite(.serialized)
struct FprintdAuthenticatorTests {
    // MARK: enrollment()

    @Test func enrollmentIsNilWithoutPrints() async throws {
        try await withMock { mock, authenticator in
            _ = try await mock.addDevice()
            #expect(try await authenticator.enrollment() == nil)
        }
    }

    @Test func enrollmentIdentifiesDeviceAndSortedFingers() async throws {
        try await withMock { mock, authenticator in
            let device = try await mock.addDevice()
            try await mock.setEnrolledFingers(device, ["right-index-finger", "left-index-finger"])
            let enrollment = try #require(try await authenticator.enrollment())
            #expect(enrollment.biometryType == .touchID)
            #expect(authenticator.biometryType == .touchID)
            // The documented formula: SHA-256 over tag, device path and sorted names, each NUL-ended.
            var hash = SHA256()
            for field in ["TPMKeychainFprintd.enrollment.v1", device, "left-index-finger", "right-index-finger"] {
                hash.update(data: Array(field.utf8) + [0])
            }
            #expect(enrollment.identifier == Array(hash.finalize()))
        }
    }

    @Test func identifierChangesWhenAFingerIsAddedOrRemoved() async throws {
        try await withMock { mock, authenticator in
            let device = try await mock.addDevice()
            try await mock.setEnrolledFingers(device, ["right-index-finger"])
            let one = try #require(try await authenticator.enrollment()).identifier

            try await mock.setEnrolledFingers(device, ["right-index-finger", "left-thumb"])
            let two = try #require(try await authenticator.enrollment()).identifier
            #expect(two != one, "adding a finger must change the identifier")

            try await mock.setEnrolledFingers(device, ["left-thumb"])
            let three = try #require(try await authenticator.enrollment()).identifier
            #expect(three != two, "removing a finger must change the identifier")
            #expect(three != one)

            try await mock.setEnrolledFingers(device, [])
            #expect(try await authenticator.enrollment() == nil, "removing the last finger leaves nothing enrolled")
        }
    }

    /// The documented limit: fprintd shows names only, so the same names give the same identifier,
    /// whatever prints are behind them (re-enrolling a finger is not seen).
    @Test func identifierIsUnchangedForTheSameFingerSet() async throws {
        try await withMock { mock, authenticator in
            let device = try await mock.addDevice()
            try await mock.setEnrolledFingers(device, ["right-index-finger", "left-index-finger"])
            let first = try #require(try await authenticator.enrollment()).identifier
            #expect(try await authenticator.enrollment()?.identifier == first)

            try await mock.setEnrolledFingers(device, ["left-index-finger", "right-index-finger"])
            #expect(
                try await authenticator.enrollment()?.identifier == first,
                "the order fprintd lists fingers in must not matter")
            // A second authenticator (another process, a restart) derives the same identifier.
            #expect(try await FprintdAuthenticator(busAddress: mock.address).enrollment()?.identifier == first)
        }
    }

    @Test func identifierChangesWithTheDefaultDevice() async throws {
        try await withMock { mock, authenticator in
            let first = try await mock.addDevice("Reader one")
            let second = try await mock.addDevice("Reader two")
            try await mock.setEnrolledFingers(first, ["right-index-finger"])
            try await mock.setEnrolledFingers(second, ["right-index-finger"])
            let before = try #require(try await authenticator.enrollment()).identifier
            try await mock.removeDevice(first)
            let after = try #require(try await authenticator.enrollment()).identifier
            #expect(after != before)
        }
    }

    @Test func noDeviceIsNotAvailable() async throws {
        try await withMock { mock, authenticator in
            let listing = await expectAuthenticationError(.biometryNotAvailable) { () throws(AuthenticationError) in
                _ = try await authenticator.enrollment()
            }
            let verifying = await expectAuthenticationError(.biometryNotAvailable) { () throws(AuthenticationError) in
                try await authenticator.verify(reason: "unlock")
            }
            for error in [listing, verifying] {
                #expect(
                    error?.message.contains("net.reactivated.Fprint.Error.NoSuchDevice") == true,
                    "\(String(describing: error))")
            }
        }
    }

    @Test func fprintdMissingFromTheBusIsNotAvailable() async throws {
        let mock = try await FprintdMock.start(withService: false)
        defer { mock.stop() }
        let authenticator = FprintdAuthenticator(busAddress: mock.address)
        let error = await expectAuthenticationError(.biometryNotAvailable) { () throws(AuthenticationError) in
            _ = try await authenticator.enrollment()
        }
        // The bus answered (ServiceUnknown): not a connection failure.
        #expect(error?.message.contains("fprintd is not running") == true, "\(String(describing: error))")
    }

    @Test func noBusIsNotAvailable() async throws {
        let authenticator = FprintdAuthenticator(busAddress: "unix:path=/nonexistent/fprintd-tests/bus")
        await expectAuthenticationError(.biometryNotAvailable) { () throws(AuthenticationError) in
            _ = try await authenticator.enrollment()
        }
        await expectAuthenticationError(.biometryNotAvailable) { () throws(AuthenticationError) in
            try await authenticator.verify(reason: "unlock")
        }
    }

    @Test func listPermissionDeniedNamesPolkit() async throws {
        try await withMock { mock, authenticator in
            let device = try await mock.addDevice()
            try await mock.setEnrolledFingers(device, ["right-index-finger"])
            try await mock.setMethodError(
                device, method: "ListEnrolledFingers", name: "net.reactivated.Fprint.Error.PermissionDenied")
            let error = await expectAuthenticationError(.biometryNotAvailable) { () throws(AuthenticationError) in
                _ = try await authenticator.enrollment()
            }
            #expect(error?.message.contains("polkit") == true, "\(String(describing: error))")
        }
    }

    // MARK: verify(reason:)

    @Test func matchSucceedsAndReleases() async throws {
        try await withMock { mock, authenticator in
            let device = try await enrolledDevice(mock, script: [("verify-match", true, 10)])
            try await authenticator.verify(reason: "unlock")
            #expect(
                try await mock.calls(device) == [
                    .init(method: "Claim", arguments: [""]),
                    .init(method: "VerifyStart", arguments: ["any"]),
                    .init(method: "VerifyStop", arguments: []),
                    .init(method: "Release", arguments: []),
                ])
            // Released, so the reader can be claimed again.
            try await authenticator.verify(reason: "again")
        }
    }

    @Test func noMatchFailsAndReleases() async throws {
        try await withMock { mock, authenticator in
            let device = try await enrolledDevice(mock, script: [("verify-no-match", true, 10)])
            await expectAuthenticationError(.authenticationFailed) { () throws(AuthenticationError) in
                try await authenticator.verify(reason: "unlock")
            }
            #expect(try await mock.calls(device).map(\.method) == ["Claim", "VerifyStart", "VerifyStop", "Release"])
        }
    }

    @Test func retryScanKeepsWaitingForTheMatch() async throws {
        try await withMock { mock, authenticator in
            let device = try await enrolledDevice(
                mock,
                script: [
                    ("verify-retry-scan", false, 10), ("verify-swipe-too-short", false, 50),
                    ("verify-retry-scan", false, 50), ("verify-match", true, 50),
                ])
            try await authenticator.verify(reason: "unlock")
            #expect(try await mock.calls(device).map(\.method) == ["Claim", "VerifyStart", "VerifyStop", "Release"])
        }
    }

    @Test func retryScanThenNoMatchFails() async throws {
        try await withMock { mock, authenticator in
            _ = try await enrolledDevice(
                mock, script: [("verify-retry-scan", false, 10), ("verify-no-match", true, 50)])
            await expectAuthenticationError(.authenticationFailed) { () throws(AuthenticationError) in
                try await authenticator.verify(reason: "unlock")
            }
        }
    }

    @Test(arguments: ["verify-disconnected", "verify-unknown-error"])
    func readerFailureIsNotAvailable(result: String) async throws {
        try await withMock { mock, authenticator in
            let device = try await enrolledDevice(mock, script: [(result, true, 10)])
            await expectAuthenticationError(.biometryNotAvailable) { () throws(AuthenticationError) in
                try await authenticator.verify(reason: "unlock")
            }
            #expect(try await mock.calls(device).map(\.method).last == "Release")
        }
    }

    @Test func cancelStopsAVerificationWithAppCancel() async throws {
        try await withMock(timeout: .seconds(30)) { mock, authenticator in
            // One retry, then nothing: the person never touches the reader again.
            let device = try await enrolledDevice(mock, script: [("verify-retry-scan", false, 10)])
            let started = ContinuousClock.now
            let verification = startVerification(authenticator)
            try await mock.waitForCall("VerifyStart", on: device)
            await authenticator.cancel()
            let error = await verification.value
            #expect(error?.code == .appCancel, "\(String(describing: error))")
            #expect(ContinuousClock.now - started < .seconds(15), "cancel must not wait for the timeout")
            #expect(try await mock.calls(device).map(\.method) == ["Claim", "VerifyStart", "VerifyStop", "Release"])
        }
    }

    @Test func cancellingTheTaskIsAppCancel() async throws {
        try await withMock(timeout: .seconds(30)) { mock, authenticator in
            let device = try await enrolledDevice(mock, script: [])
            let verification = startVerification(authenticator)
            try await mock.waitForCall("VerifyStart", on: device)
            verification.cancel()
            #expect(await verification.value?.code == .appCancel)
            #expect(try await mock.calls(device).map(\.method) == ["Claim", "VerifyStart", "VerifyStop", "Release"])
        }
    }

    @Test func cancelWithNothingRunningDoesNotAffectTheNextVerification() async throws {
        try await withMock { mock, authenticator in
            _ = try await enrolledDevice(mock, script: [("verify-match", true, 10)])
            await authenticator.cancel()
            try await authenticator.verify(reason: "unlock")
        }
    }

    @Test func timeoutIsSystemCancelAndReleases() async throws {
        try await withMock(timeout: .milliseconds(800)) { mock, authenticator in
            let device = try await enrolledDevice(mock, script: [("verify-retry-scan", false, 10)])
            let started = ContinuousClock.now
            await expectAuthenticationError(.systemCancel) { () throws(AuthenticationError) in
                try await authenticator.verify(reason: "unlock")
            }
            let elapsed = ContinuousClock.now - started
            #expect(elapsed >= .milliseconds(800), "gave up after \(elapsed)")
            #expect(elapsed < .seconds(10), "gave up after \(elapsed)")
            #expect(try await mock.calls(device).map(\.method) == ["Claim", "VerifyStart", "VerifyStop", "Release"])
        }
    }

    @Test func claimPermissionDeniedNamesPolkitAndClaimsNothing() async throws {
        try await withMock { mock, authenticator in
            let device = try await enrolledDevice(mock, script: [("verify-match", true, 10)])
            try await mock.setMethodError(
                device, method: "Claim", name: "net.reactivated.Fprint.Error.PermissionDenied")
            let error = await expectAuthenticationError(.biometryNotAvailable) { () throws(AuthenticationError) in
                try await authenticator.verify(reason: "unlock")
            }
            #expect(error?.message.contains("polkit") == true, "\(String(describing: error))")
            #expect(try await mock.calls(device).map(\.method) == ["Claim"], "nothing to release when the claim failed")
        }
    }

    @Test func readerInUseIsNotAvailable() async throws {
        try await withMock { mock, authenticator in
            let device = try await enrolledDevice(mock, script: [("verify-match", true, 10)])
            try await mock.setMethodError(device, method: "Claim", name: "net.reactivated.Fprint.Error.AlreadyInUse")
            await expectAuthenticationError(.biometryNotAvailable) { () throws(AuthenticationError) in
                try await authenticator.verify(reason: "unlock")
            }
        }
    }

    @Test func noEnrolledPrintsAtVerifyStartIsNotEnrolledAndReleases() async throws {
        try await withMock { mock, authenticator in
            let device = try await mock.addDevice()
            try await mock.setVerifyScript(device, [("verify-match", true, 10)])
            await expectAuthenticationError(.biometryNotEnrolled) { () throws(AuthenticationError) in
                try await authenticator.verify(reason: "unlock")
            }
            #expect(try await mock.calls(device).map(\.method) == ["Claim", "VerifyStart", "Release"])
        }
    }

    @Test func fprintdVanishingDuringVerificationIsNotAvailable() async throws {
        try await withMock(timeout: .seconds(30)) { mock, authenticator in
            let device = try await enrolledDevice(mock, script: [])
            let verification = startVerification(authenticator)
            try await mock.waitForCall("VerifyStart", on: device)
            mock.stop() // the bus and fprintd die together
            #expect(await verification.value?.code == .biometryNotAvailable)
        }
    }

    // MARK: Signals from anyone but fprintd

    @Test(
        "a forged match, sent unicast by another connection while a verification waits, is ignored: fprintd's own no-match decides"
    )
    func forgedMatchIsIgnored() async throws {
        try await withMock { mock, authenticator in
            let device = try await enrolledDevice(mock, script: [])
            let verification = startVerification(authenticator)
            try await mock.waitForCall("VerifyStart", on: device)
            try await mock.forgeVerifyStatus(device, "verify-match", done: true)
            try await mock.emitVerifyStatus(device, "verify-no-match", done: true)
            #expect(await verification.value?.code == .authenticationFailed)
        }
    }

    @Test("a forged no-match is ignored too, and fprintd's own match still succeeds")
    func forgedNoMatchIsIgnoredAndTheRealMatchSucceeds() async throws {
        try await withMock { mock, authenticator in
            let device = try await enrolledDevice(mock, script: [])
            let verification = startVerification(authenticator)
            try await mock.waitForCall("VerifyStart", on: device)
            try await mock.forgeVerifyStatus(device, "verify-no-match", done: true)
            try await mock.emitVerifyStatus(device, "verify-match", done: true)
            let error = await verification.value
            #expect(error == nil, "\(String(describing: error))")
        }
    }

    @Test(
        "fprintd's name changing owner during a verification fails it: a new owner's statuses are not the claimed reader's"
    )
    func ownerChangeFailsTheVerification() async throws {
        try await withMock { mock, authenticator in
            let device = try await enrolledDevice(mock, script: [])
            let verification = startVerification(authenticator)
            try await mock.waitForCall("VerifyStart", on: device)
            try await mock.replaceService()
            #expect(await verification.value?.code == .biometryNotAvailable)
        }
    }

    // MARK: Helpers

    /// Starts a private bus with the mock, runs `body` with an authenticator pointed at it, and
    /// kills both processes afterwards.
    private func withMock(
        timeout: Duration = .seconds(10),
        _ body: (FprintdMock, FprintdAuthenticator) async throws -> Void
    ) async throws {
        let mock = try await FprintdMock.start()
        defer { mock.stop() }
        do {
            try await body(mock, FprintdAuthenticator(busAddress: mock.address, timeout: timeout))
        } catch {
            Issue.record("\(error)\n\(mock.logs())")
        }
    }

    /// A default reader with "right-index-finger" enrolled and `script` played on VerifyStart.
    private func enrolledDevice(_ mock: FprintdMock, script: [(String, Bool, Int)]) async throws -> String {
        let device = try await mock.addDevice()
        try await mock.setEnrolledFingers(device, ["right-index-finger"])
        try await mock.setVerifyScript(device, script.map { (result: $0.0, done: $0.1, milliseconds: $0.2) })
        return device
    }
}

/// Expects `body` to throw an ``AuthenticationError`` with `code`, and returns it.
@discardableResult
func expectAuthenticationError(
    _ code: AuthenticationError.Code, sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () async throws(AuthenticationError) -> Void
) async -> AuthenticationError? {
    do {
        try await body()
        Issue.record("expected AuthenticationError.\(code), but nothing was thrown", sourceLocation: sourceLocation)
        return nil
    } catch {
        #expect(error.code == code, "got \(error)", sourceLocation: sourceLocation)
        return error
    }
}

/// A verification running in its own task, giving its error (nil on success) when it ends.
func startVerification(_ authenticator: FprintdAuthenticator) -> Task<AuthenticationError?, Never> {
    Task { () async -> AuthenticationError? in
        do throws(AuthenticationError) {
            try await authenticator.verify(reason: "unlock")
            return nil
        } catch {
            return error
        }
    }
}

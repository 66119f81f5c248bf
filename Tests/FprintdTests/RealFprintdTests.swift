import Foundation
import LocalAuthenticationCompat
import TPMKeychain
import TPMKeychainFprintd
import TPMKeychainTesting
import Testing

/// FprintdAuthenticator against Debian's real fprintd with libfprint's virtual reader: what the
/// python-dbusmock stand-in cannot show (claims, the daemon's own statuses, its print store).
@Suite("the real fprintd")
struct RealFprintdTests {
    @Test(
        "An enrolled finger matches, another finger does not, no finger times out, a finger added changes the enrollment, and an unplugged reader is not available"
    )
    func verificationOutcomes() async throws {
        let real = try await RealFprintd.start()
        defer { real.stop() }
        do {
            let authenticator = FprintdAuthenticator(busAddress: real.address, timeout: .seconds(120))
            #expect(try await authenticator.enrollment() == nil)
            try await real.enroll("right-index-finger", identity: "alice")
            let enrolled = try #require(try await authenticator.enrollment())

            let match = startVerification(authenticator)
            try await real.touch("alice")
            let matched = await match.value
            #expect(matched == nil, "\(String(describing: matched))")

            let other = startVerification(authenticator)
            try await real.touch("mallory")
            #expect(await other.value?.code == .authenticationFailed)

            // No finger: the verification ends at its timeout, and the reader is free again after.
            let impatient = FprintdAuthenticator(busAddress: real.address, timeout: .seconds(1))
            #expect(await startVerification(impatient).value?.code == .systemCancel)
            let again = startVerification(authenticator)
            try await real.touch("alice")
            let matchedAgain = await again.value
            #expect(matchedAgain == nil, "\(String(describing: matchedAgain))")

            try await real.enroll("left-thumb", identity: "alice-thumb")
            let widened = try #require(try await authenticator.enrollment())
            #expect(widened.identifier != enrolled.identifier)

            let unplugged = startVerification(authenticator)
            try await real.unplugWhileVerifying()
            #expect(await unplugged.value?.code == .biometryNotAvailable)
        } catch {
            Issue.record("\(error)\n\(real.logs())")
        }
    }

    @Test(
        "LAContext over the real fprintd: Touch ID, a policy evaluated with the enrolled finger, a domain state that changes with the enrolled set; polkit refusing makes biometry unavailable"
    )
    func laContextAndPolkit() async throws {
        let real = try await RealFprintd.start()
        defer { real.stop() }
        do {
            try await real.enroll("right-index-finger", identity: "alice")
            let reader = FprintdAuthenticator(busAddress: real.address, timeout: .seconds(120))
            let context = LAContext(AuthenticationContext(authenticator: reader))
            var error: NSError?
            #expect(
                context.canEvaluatePolicy(.deviceOwnerAuthenticationWithBiometrics, error: &error),
                "\(String(describing: error))")
            #expect(context.biometryType == .touchID)
            let state = context.evaluatedPolicyDomainState
            let evaluation = Task {
                try await context.evaluatePolicy(.deviceOwnerAuthenticationWithBiometrics, localizedReason: "sign in")
            }
            try await real.touch("alice")
            #expect(try await evaluation.value)

            try await real.enroll("left-thumb", identity: "alice-thumb")
            let later = LAContext(AuthenticationContext(authenticator: reader))
            #expect(later.canEvaluatePolicy(.deviceOwnerAuthenticationWithBiometrics, error: nil))
            #expect(later.evaluatedPolicyDomainState != state)

            try await real.denyPolkit()
            await expectAuthenticationError(.biometryNotAvailable) { () throws(AuthenticationError) in
                _ = try await reader.enrollment()
            }
        } catch {
            Issue.record("\(error)\n\(real.logs())")
        }
    }

    @Test(
        "A biometryCurrentSet item on swtpm opens with the enrolled finger through the real fprintd, is refused to another finger, and is invalidated once a finger is added"
    )
    func protectedItemThroughTheRealDaemon() async throws {
        let real = try await RealFprintd.start()
        defer { real.stop() }
        let simulator = try SoftwareTPM.start()
        defer { simulator.stop() }
        let directory = NSTemporaryDirectory() + "real-fprintd-store-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        do {
            var location = try KeychainLocation(path: directory + "/store", tcti: simulator.tcti)
            location.deviceDirectory = directory + "/device"
            let keychain = try Keychain(service: "com.example.real-fprintd", location: location)
            try await real.enroll("right-index-finger", identity: "alice")
            let authenticator = FprintdAuthenticator(busAddress: real.address, timeout: .seconds(120))
            let context = AuthenticationContext(authenticator: authenticator, location: location)
            try await keychain.set(
                "s3cret", forKey: "token",
                accessControl: try AccessControl(.whenUnlockedThisDeviceOnly, flags: .biometryCurrentSet),
                context: context)

            let read = Task { try await keychain.get("token", as: String.self, context: context) }
            try await real.touch("alice")
            #expect(try await read.value == "s3cret")

            let refused = Task { try await keychain.get("token", as: String.self, context: context) }
            try await real.touch("mallory")
            await #expect(throws: KeychainError.self) { _ = try await refused.value }

            try await real.enroll("left-thumb", identity: "alice-thumb")
            do {
                _ = try await keychain.get("token", as: String.self, context: context)
                Issue.record("an item bound to the old enrollment was read")
            } catch {
                #expect(error.code == .itemInvalidated, "\(error)")
            }
        } catch {
            Issue.record("\(error)\n\(real.logs())")
        }
    }
}

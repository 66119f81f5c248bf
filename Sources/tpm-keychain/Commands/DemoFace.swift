import SystemCalls
import TPMKeychain

/// The demo's stand-in for a face recogniser: every verification matches at once, and
/// ``reenroll()`` replaces the enrolled set, as enrolling a face again would. The shipped tool
/// carries this much rather than the test harness.
final class DemoFace: Authenticator {
    let biometryType = BiometryType.faceID
    private let state = Locked((identifier: DemoFace.freshIdentifier(), attempts: 0))

    /// How many verifications were asked for.
    var attempts: Int { state.withLock { $0.attempts } }

    /// A new enrolled set: items bound to the previous one never open again.
    func reenroll() {
        state.withLock { $0.identifier = Self.freshIdentifier() }
    }

    func enrollment() async throws(AuthenticationError) -> Enrollment? {
        Enrollment(biometryType: biometryType, identifier: state.withLock { $0.identifier })
    }

    func verify(reason: String) async throws(AuthenticationError) {
        state.withLock { $0.attempts += 1 }
    }

    func cancel() async {}

    private static func freshIdentifier() -> [UInt8] {
        (0..<16).map { _ in UInt8.random(in: .min ... .max) }
    }
}

import FoundationEssentials
import SystemCalls
import TPMKeychain
import WireFormat

#if canImport(Glibc)
import Glibc
#endif

/// Asks the enrollment helper (`tpm-keychain-enrollment`, run by root) for an identifier of the
/// calling user's print files: what fprintd cannot tell a non-root caller.
struct EnrollmentHelperClient {
    /// What the helper said.
    enum Answer: Equatable {
        /// No helper is installed (its socket is not there): the finger names are all there is.
        case notInstalled
        /// The helper's keyed hash of this user's prints.
        case prints([UInt8])
        /// The helper finds no print of this user.
        case noPrints
    }

    static let defaultSocket = "/run/tpm-keychain-enrollment.sock"
    static let socketVariable = "TPM_KEYCHAIN_ENROLLMENT_HELPER"

    let socketPath: String

    /// - Throws: ``AuthenticationError`` `.biometryNotAvailable` when a helper is installed but
    ///   does not answer, or its socket is not root's: falling back to the finger names would
    ///   look like an enrollment change and invalidate every biometryCurrentSet item.
    func ask() throws(AuthenticationError) -> Answer {
        let line: String
        do throws(RootHelperSocket.Failure) {
            line = try RootHelperSocket(path: socketPath).ask("enrollment")
        } catch {
            switch error {
            case .notInstalled: return .notInstalled
            case .unavailable(let reason): throw unavailable(reason)
            }
        }
        if line == "1 none" { return .noPrints }
        if line.hasPrefix("1 "), let bytes = [UInt8](hexString: String(line.dropFirst(2))), bytes.count == 32 {
            return .prints(bytes)
        }
        throw unavailable("the enrollment helper refused: \(line.isEmpty ? "no answer" : line)")
    }

    private func unavailable(_ message: String) -> AuthenticationError {
        AuthenticationError(.biometryNotAvailable, message)
    }
}

import FoundationEssentials
import KeychainVocabulary
import SystemCalls
import TPM
import WireFormat

#if canImport(Glibc)
import Glibc
#endif

/// A private store's master key sealed with its user's binding secret (docs/SECURITY.md, "User
/// binding"): a copy of the store's files then opens for nobody else who may use the TPM, as an
/// iOS keychain opens only for its user.
///
/// The secret comes from `tpm-keychain-enrollment`, which runs as root and derives it from the
/// caller's user ID (SO_PEERCRED) under a key only root reads: no other user can ask for it or
/// compute it. Where no helper is installed nothing is bound, which `doctor` reports.
package enum UserBinding {
    package static let socketVariable = "TPM_KEYCHAIN_ENROLLMENT_HELPER"
    package static let defaultSocket = "/run/tpm-keychain-enrollment.sock"

    /// The helper's socket: `TPM_KEYCHAIN_ENROLLMENT_HELPER`, else the installed one.
    package static var socketPath: String {
        ProcessInfo.processInfo.environment[socketVariable].flatMap { $0.isEmpty ? nil : $0 } ?? defaultSocket
    }

    /// This process's user.
    static var currentUser: UInt32 { UInt32(geteuid()) }

    /// How long a binding secret the helper gave stays in the user's kernel keyring, so that
    /// lookups in a row skip the helper's round trip (a process spawn under systemd).
    static let cacheSeconds: UInt32 = 600

    /// The keyring entry of the helper at ``socketPath``'s answer: another helper (another key)
    /// never meets a secret this one gave.
    static var cacheName: String { "tpm-keychain:user-binding:v1:" + socketPath }

    /// A binding secret, and whether it came from the keyring rather than the helper just now.
    struct Secret {
        let bytes: SecretBytes
        let cached: Bool
    }

    /// This user's binding secret for a store being created or first bound; nil where no helper
    /// gives one (none installed, one from before user binding, or one that does not answer now),
    /// so the store is not bound yet: an open after the helper answers binds it.
    static func secretIfAvailable() -> SecretBytes? {
        guard case .success(let secret) = ask() else { return nil }
        return secret
    }

    /// The secret that opens a store bound to `user`.
    ///
    /// - Throws: ``KeychainError`` `.permissionDenied` when this process runs as another user;
    ///   `.notAvailable` when the helper is not there or does not answer.
    ///
    /// - Parameter fresh: ask the helper even when the keyring holds a secret (which the TPM
    ///   just refused: the helper's key may have changed since).
    static func secret(
        forStoreBoundTo user: UInt32, at root: String, fresh: Bool = false
    ) throws(KeychainError) -> Secret {
        guard user == currentUser else {
            throw KeychainError(
                .permissionDenied,
                "The keychain at \(root) is bound to user \(userName(user)): it opens only for them, and this process runs as \(userName(currentUser))"
            )
        }
        if !fresh, let cached = UserKeyring.read(cacheName, count: 32, { SecretBytes(copying: $0) }) {
            return Secret(bytes: cached, cached: true)
        }
        switch ask() {
        case .success(let secret?): return Secret(bytes: secret, cached: false)
        case .success(nil), .failure(.notInstalled):
            throw KeychainError(
                .notAvailable,
                "The keychain at \(root) is bound to its user through the enrollment helper, which is not installed at \(socketPath): install it again (sudo Scripts/install-enrollment-helper.sh) with its key in /var/lib/tpm-keychain-enrollment, or recover the store with its recovery key"
            )
        case .failure(.unavailable(let reason)):
            throw KeychainError(
                .notAvailable,
                "The keychain at \(root) is bound to its user through the enrollment helper, which \(reason): start it (systemctl start tpm-keychain-enrollment.socket) and try again"
            )
        }
    }

    /// Whether stores opened by this user now are bound to them, and if not, why.
    package static func availability() -> (bound: Bool, reason: String) {
        // A report changes nothing: the answer is not kept in the keyring.
        switch ask(keeping: false) {
        case .success(.some): return (true, "the enrollment helper at \(socketPath) gives this user a binding secret")
        case .success(.none): return (false, "the enrollment helper at \(socketPath) is older than user binding")
        case .failure(.notInstalled): return (false, "no enrollment helper is installed at \(socketPath)")
        case .failure(.unavailable(let reason)): return (false, "the enrollment helper \(reason)")
        }
    }

    /// The helper's answer: the secret; nil from a helper that does not bind users (it answers
    /// every request as an enrollment query).
    ///
    /// - Parameter keeping: keep a secret the helper gives in the user's keyring for later opens.
    private static func ask(keeping: Bool = true) -> Result<SecretBytes?, RootHelperSocket.Failure> {
        let line: String
        do {
            line = try RootHelperSocket(path: socketPath).ask("user-binding")
        } catch {
            return .failure(error)
        }
        if line.hasPrefix("binding "), var bytes = [UInt8](hexString: String(line.dropFirst(8))), bytes.count == 32 {
            defer { erase(&bytes) }
            if keeping { bytes.withUnsafeBytes { _ = UserKeyring.store(cacheName, $0, timeoutSeconds: cacheSeconds) } }
            return .success(bytes.withUnsafeBytes { SecretBytes(copying: $0) })
        }
        if line.hasPrefix("1 ") { return .success(nil) }
        return .failure(.unavailable("refused: \(line.isEmpty ? "no answer" : line)"))
    }

    private static func userName(_ user: UInt32) -> String {
        guard let entry = getpwuid(uid_t(user)) else { return "ID \(user)" }
        return "\(String(cString: entry.pointee.pw_name)) (ID \(user))"
    }
}

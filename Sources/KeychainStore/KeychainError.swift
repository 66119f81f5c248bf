/// A keychain operation that did not succeed, with what a caller acts on in ``code``.
///
/// Messages name what went wrong and what to do; they never contain secrets.
public struct KeychainError: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Code: Sendable, Hashable {
        /// No item exists for the service and account (errSecItemNotFound).
        case itemNotFound
        /// `add` found an item that already exists (errSecDuplicateItem).
        case duplicateItem
        /// The stored value cannot be read as the requested type (not UTF-8, not that JSON shape).
        case decodingFailed
        /// A file was modified, truncated, swapped or renamed: authentication failed. Nothing was returned.
        case tampered
        /// The store was written by a newer TPMKeychain.
        case unsupportedVersion
        /// No TPM could be reached.
        case tpmUnavailable
        /// The store's master key is sealed to another TPM (the store was copied, or the TPM was cleared).
        case wrongTPM
        /// The TPM refused the authorization (wrong passcode) or a policy no longer holds.
        case authenticationFailed
        /// The TPM's dictionary-attack lockout is in force.
        case lockout
        /// An argument is out of range: empty or oversized names, values over the limit.
        case invalidParameter
        /// A file or directory is a symlink, has another owner, is reachable by group or others, or has extra links.
        case unsafeFileSystem
        /// The file system failed (permission, disk full, I/O error).
        case storageFailed
        /// The store was closed.
        case storeClosed
    }

    public let code: Code
    public let message: String
    /// The lower-level error, for logs: a TPM error, an errno, a decoding error.
    public let underlyingError: (any Error)?

    public init(_ code: Code, _ message: String, underlying: (any Error)? = nil) {
        self.code = code
        self.message = message
        underlyingError = underlying
    }

    public var description: String {
        guard let underlyingError else { return message }
        return "\(message) (\(underlyingError))"
    }

    public static func == (lhs: KeychainError, rhs: KeychainError) -> Bool {
        lhs.code == rhs.code && lhs.message == rhs.message
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(code)
        hasher.combine(message)
    }
}

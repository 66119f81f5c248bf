/// A keychain operation that did not succeed, with what a caller acts on in ``code``.
///
/// The one error type of every layer, from the store's files to SecItem and the tools. Messages
/// state what went wrong and, where the library offers one, the way out; they never contain secrets.
public struct KeychainError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What a caller acts on. An extensible set, as `Errno` is: new codes are added as static
    /// members, so a `switch` over codes needs a `default` and never breaks when one appears.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        /// A stable name, for logs and scripts.
        public let name: String

        private init(_ name: String) { self.name = name }

        /// The code's name, as in the source (`itemNotFound`).
        public var description: String { name }

        /// No item exists for the service and account (errSecItemNotFound).
        public static let itemNotFound = Code("itemNotFound")
        /// `add` found an item that already exists (errSecDuplicateItem).
        public static let duplicateItem = Code("duplicateItem")
        /// The stored value cannot be read as the requested type (not UTF-8, not that JSON shape).
        public static let decodingFailed = Code("decodingFailed")
        /// A file was modified, truncated, swapped, renamed or removed (a store whose metadata is
        /// gone is damaged): authentication failed. Nothing was returned and nothing was changed.
        public static let tampered = Code("tampered")
        /// The store was written by a newer TPMKeychain.
        public static let unsupportedVersion = Code("unsupportedVersion")
        /// No TPM could be reached.
        public static let tpmUnavailable = Code("tpmUnavailable")
        /// The store's master key is sealed to another TPM (the store was copied, or the TPM was cleared).
        public static let wrongTPM = Code("wrongTPM")
        /// The TPM refused the authorization (wrong passcode) or a policy no longer holds.
        public static let authenticationFailed = Code("authenticationFailed")
        /// Reading needs a person (a biometric match or the passcode) and the caller allowed no
        /// interaction, gave no authentication context, or the keychain is locked
        /// (errSecInteractionNotAllowed).
        public static let interactionNotAllowed = Code("interactionNotAllowed")
        /// The person dismissed the prompt (errSecUserCanceled).
        public static let userCanceled = Code("userCanceled")
        /// The item can never be read again: it was bound to a biometric enrollment that changed,
        /// or to a passcode that was removed. A read never deletes it (the reader may see another
        /// device's state): it stays until deleted, or until a purge
        /// (`KeychainLocation.purgeInvalidatedItems()`) proves it dead against the TPM's counters.
        /// iOS reports errSecItemNotFound.
        public static let itemInvalidated = Code("itemInvalidated")
        /// The operation needs a device passcode and none is set (adding a
        /// whenPasscodeSetThisDeviceOnly or devicePasscode item; errSecAuthFailed on iOS).
        public static let passcodeNotSet = Code("passcodeNotSet")
        /// The item needs biometry and nothing is enrolled.
        public static let biometryNotEnrolled = Code("biometryNotEnrolled")
        /// What the operation needs does not exist here: no authenticator, a TPM without room
        /// for NV indices (errSecNotAvailable).
        public static let notAvailable = Code("notAvailable")
        /// The TPM's dictionary-attack lockout is in force.
        public static let lockout = Code("lockout")
        /// An argument is out of range: empty or oversized names, values over the limit.
        public static let invalidParameter = Code("invalidParameter")
        /// A file or directory is a symlink, has another owner, is reachable by group or others, or has extra links.
        public static let unsafeFileSystem = Code("unsafeFileSystem")
        /// This user may not read or write a file or directory of the store (EACCES, EPERM).
        public static let permissionDenied = Code("permissionDenied")
        /// The caller is not entitled to the item's access group (iOS: errSecMissingEntitlement).
        public static let missingEntitlement = Code("missingEntitlement")
        /// The file system failed (disk full, I/O error).
        public static let storageFailed = Code("storageFailed")
        /// The store was closed.
        public static let storeClosed = Code("storeClosed")
        /// There is no store at the location, and the operation does not create one.
        public static let storeNotFound = Code("storeNotFound")
        /// A wait had a limit and reached it: the TPM did not answer, or another process held a
        /// lock of the store. The message names what was waited for; trying again later may work.
        public static let timedOut = Code("timedOut")
        /// The store is rollback-protected and found a file older than its manifest records, or
        /// missing: an item, a service's directory or the whole store was put back from an older
        /// copy, or an item file was deleted outside the keychain. Nothing old was returned; the
        /// message says what was found and what to do.
        public static let rolledBack = Code("rolledBack")
        /// The store's rollback counter is gone from the TPM (cleared, or the NV index deleted):
        /// its files can no longer be proven current. The recovery key accepts them as they are.
        public static let rollbackCounterMissing = Code("rollbackCounterMissing")

        /// The biometric way into a key record is gone (its enrollment changed); another may
        /// remain. Never reaches a caller: the library falls back to the passcode or reports
        /// ``itemInvalidated``.
        package static let biometryInvalidated = Code("biometryInvalidated")
    }

    /// What a caller acts on.
    public let code: Code
    /// What happened and what to do about it, for people; never contains a secret.
    public let message: String
    /// The lower-level error, for logs: a TPM error, an errno, a decoding error.
    public let underlyingError: (any Error)?

    /// An error with a code, a message for people and, when there is one, its cause.
    ///
    /// - Parameters:
    ///   - code: what a caller acts on.
    ///   - message: a sentence for people, without secrets.
    ///   - underlying: the lower-level cause, for logs.
    public init(_ code: Code, _ message: String, underlying: (any Error)? = nil) {
        self.code = code
        self.message = message
        underlyingError = underlying
    }

    /// The message, followed by the underlying error in parentheses when there is one.
    public var description: String {
        guard let underlyingError else { return message }
        return "\(message) (\(underlyingError))"
    }

    /// Equal code and message; the underlying error is not compared.
    public static func == (lhs: KeychainError, rhs: KeychainError) -> Bool {
        lhs.code == rhs.code && lhs.message == rhs.message
    }

    /// Hashes the code and the message, consistently with `==`.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(code)
        hasher.combine(message)
    }
}

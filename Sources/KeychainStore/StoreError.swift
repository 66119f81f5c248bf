/// A keychain operation that did not succeed, with what a caller acts on in ``code``.
///
/// Messages name what went wrong and what to do; they never contain secrets.
package struct StoreError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What a caller acts on. An extensible set, as `Errno` is: new codes are added as static
    /// members, so a `switch` over codes needs a `default` and never breaks when one appears.
    package struct Code: Sendable, Hashable, CustomStringConvertible {
        /// A stable name, for logs and scripts.
        package let name: String

        private init(_ name: String) { self.name = name }

        /// The code's name, as in the source (`itemNotFound`).
        package var description: String { name }

        /// No item exists for the service and account (errSecItemNotFound).
        package static let itemNotFound = Code("itemNotFound")
        /// `add` found an item that already exists (errSecDuplicateItem).
        package static let duplicateItem = Code("duplicateItem")
        /// The stored value cannot be read as the requested type (not UTF-8, not that JSON shape).
        package static let decodingFailed = Code("decodingFailed")
        /// A file was modified, truncated, swapped, renamed or removed (a store whose metadata is
        /// gone is damaged): authentication failed. Nothing was returned and nothing was changed.
        package static let tampered = Code("tampered")
        /// The store was written by a newer TPMKeychain.
        package static let unsupportedVersion = Code("unsupportedVersion")
        /// No TPM could be reached.
        package static let tpmUnavailable = Code("tpmUnavailable")
        /// The store's master key is sealed to another TPM (the store was copied, or the TPM was cleared).
        package static let wrongTPM = Code("wrongTPM")
        /// The TPM refused the authorization (wrong passcode) or a policy no longer holds.
        package static let authenticationFailed = Code("authenticationFailed")
        /// Reading needs a person (a biometric match or the passcode) and the caller allowed no
        /// interaction, gave no authentication context, or the keychain is locked
        /// (errSecInteractionNotAllowed).
        package static let interactionNotAllowed = Code("interactionNotAllowed")
        /// The person dismissed the prompt (errSecUserCanceled).
        package static let userCanceled = Code("userCanceled")
        /// The item can never be read again: it was bound to a biometric enrollment that changed,
        /// or to a passcode that was removed. A read never deletes it (the reader may see another
        /// device's state): it stays until deleted, or until a purge proves it invalid against the
        /// TPM's counters. iOS reports errSecItemNotFound.
        package static let itemInvalidated = Code("itemInvalidated")
        /// The operation needs a device passcode and none is set (adding a
        /// whenPasscodeSetThisDeviceOnly or devicePasscode item; errSecAuthFailed on iOS).
        package static let passcodeNotSet = Code("passcodeNotSet")
        /// The item needs biometry and nothing is enrolled.
        package static let biometryNotEnrolled = Code("biometryNotEnrolled")
        /// What the operation needs does not exist here: no authenticator, a TPM without room
        /// for NV indices (errSecNotAvailable).
        package static let notAvailable = Code("notAvailable")
        /// The biometric way into a record is gone (its enrollment changed), another may remain.
        /// Engine-internal: the API falls back to the passcode or reports ``itemInvalidated``.
        package static let biometryInvalidated = Code("biometryInvalidated")
        /// The TPM's dictionary-attack lockout is in force.
        package static let lockout = Code("lockout")
        /// An argument is out of range: empty or oversized names, values over the limit.
        package static let invalidParameter = Code("invalidParameter")
        /// A file or directory is a symlink, has another owner, is reachable by group or others, or has extra links.
        package static let unsafeFileSystem = Code("unsafeFileSystem")
        /// This user may not read or write a file or directory of the store (EACCES, EPERM).
        package static let permissionDenied = Code("permissionDenied")
        /// The file system failed (disk full, I/O error).
        package static let storageFailed = Code("storageFailed")
        /// The store was closed.
        package static let storeClosed = Code("storeClosed")
        /// There is no store at the location, and the operation does not create one.
        package static let storeNotFound = Code("storeNotFound")
        /// A wait had a limit and reached it: the TPM did not answer, or another process held a
        /// lock of the store. The message names what was waited for; trying again later may work.
        package static let timedOut = Code("timedOut")
        /// A rollback-protected store found files older than its manifest records, or missing:
        /// an item, a group directory or the whole store was put back from an older copy, or an
        /// item file was deleted behind the keychain's back. Nothing old was returned.
        package static let rolledBack = Code("rolledBack")
        /// The store's rollback counter is gone from the TPM (the TPM was cleared, or the NV
        /// index deleted): its files can no longer be proven current. The recovery key re-seals it.
        package static let rollbackCounterMissing = Code("rollbackCounterMissing")
    }

    /// What a caller acts on.
    package let code: Code
    /// What happened and what to do about it, for people; never contains a secret.
    package let message: String
    /// The lower-level error, for logs: a TPM error, an errno, a decoding error.
    package let underlyingError: (any Error)?

    /// - Parameters:
    ///   - code: what a caller acts on.
    ///   - message: a sentence for people, without secrets.
    ///   - underlying: the lower-level cause, for logs.
    package init(_ code: Code, _ message: String, underlying: (any Error)? = nil) {
        self.code = code
        self.message = message
        underlyingError = underlying
    }

    /// The message, followed by the underlying error in parentheses when there is one.
    package var description: String {
        guard let underlyingError else { return message }
        return "\(message) (\(underlyingError))"
    }

    /// Equal code and message; the underlying error is not compared.
    package static func == (lhs: StoreError, rhs: StoreError) -> Bool {
        lhs.code == rhs.code && lhs.message == rhs.message
    }

    /// Hashes the code and the message, consistently with `==`.
    package func hash(into hasher: inout Hasher) {
        hasher.combine(code)
        hasher.combine(message)
    }
}

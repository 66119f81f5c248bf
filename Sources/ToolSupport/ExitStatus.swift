import FoundationEssentials
import SystemCalls
package import TPM
package import TPMKeychain

/// Exit statuses: `security`'s for the two outcomes scripts test for (44 item not found, 45
/// duplicate item), sysexits(3) for the rest.
package enum ExitStatus {
    package static let itemNotFound: Int32 = 44
    package static let duplicateItem: Int32 = 45
    package static let usage: Int32 = 64
    package static let dataError: Int32 = 65
    package static let noInput: Int32 = 66
    package static let unavailable: Int32 = 69
    package static let software: Int32 = 70
    package static let ioError: Int32 = 74
    package static let temporaryFailure: Int32 = 75
    package static let permissionDenied: Int32 = 77

    package static func forTPMError(_ code: TPMError.Code) -> Int32 {
        switch code {
        case .tpmUnavailable: unavailable
        case .authorizationFailed, .policyCheckFailed: permissionDenied
        case .lockout, .outOfResources, .nvSpaceExhausted, .busy, .timedOut: temporaryFailure
        case .wrongStorageKey, .malformedData: dataError
        case .invalidArgument: usage
        default: software
        }
    }

    package static func forKeychainError(_ code: KeychainError.Code) -> Int32 {
        switch code {
        // An invalidated item can never be read, as iOS reports it (errSecItemNotFound); it is kept until purged.
        case .itemNotFound, .itemInvalidated: itemNotFound
        case .duplicateItem: duplicateItem
        case .invalidParameter: usage
        // The bytes on disk cannot be used here: damaged, foreign (another TPM) or from a newer version.
        case .decodingFailed, .tampered, .unsupportedVersion, .wrongTPM, .rolledBack, .rollbackCounterMissing: dataError
        case .storeNotFound: noInput
        case .tpmUnavailable, .notAvailable, .biometryNotEnrolled: unavailable
        case .authenticationFailed, .unsafeFileSystem, .permissionDenied, .missingEntitlement, .interactionNotAllowed,
            .userCanceled, .passcodeNotSet:
            permissionDenied
        case .lockout, .timedOut: temporaryFailure
        case .storageFailed: ioError
        default: software
        }
    }

    /// The table `--help` shows; kept next to the mapping it describes.
    package static let helpText = [
        "Exit status: 0 success, 44 item not found, 45 duplicate item (as security),",
        "64 usage (also an argument that is not UTF-8, a directory that is not a store),",
        "65 unusable data (damaged or modified files, a store sealed by another TPM),",
        "66 no keychain store at the path, 69 TPM unavailable, 70 internal error, 74 I/O error,",
        "75 temporary failure (TPM lockout; a TPM or lock that did not answer within",
        "TPM_KEYCHAIN_TIMEOUT seconds, default 30), 77 permission (permission denied, wrong passcode,",
        "keychain locked, no passcode set, prompt cancelled, unsafe file modes, another device's item, an owner",
        "password file that cannot be used); an item",
        "invalidated by an enrollment or passcode change is 44 (kept until purge-invalidated); a command killed",
        "by a signal exits with that signal.",
    ].joined(separator: " ")
}

/// Writes to standard error, where every diagnostic goes (standard output carries results only).
package func printError(_ message: String) {
    writeStandardError(message + "\n")
}

/// An error of a tool's own (its input, its files, a program it runs), whose description is the
/// message people see and which maps to one exit status: how a tool's readers (another keyring's
/// export) report through a command without the command knowing each of their error types.
package protocol ToolFailure: Error, CustomStringConvertible {
    /// The sysexits(3) status this failure ends a command with.
    var exitStatus: Int32 { get }
}

import ArgumentParser
import Foundation
import TPM
import TPMKeychain
import TPMSimulator

/// Exit statuses: `security`'s for the two outcomes scripts test for (44 item not found, 45
/// duplicate item), sysexits(3) for the rest.
enum ExitStatus {
    static let itemNotFound: Int32 = 44
    static let duplicateItem: Int32 = 45
    static let usage: Int32 = 64
    static let dataError: Int32 = 65
    static let noInput: Int32 = 66
    static let unavailable: Int32 = 69
    static let software: Int32 = 70
    static let ioError: Int32 = 74
    static let temporaryFailure: Int32 = 75
    static let permissionDenied: Int32 = 77

    static func forTPMError(_ code: TPMError.Code) -> Int32 {
        switch code {
        case .tpmUnavailable: unavailable
        case .authorizationFailed, .policyCheckFailed: permissionDenied
        case .lockout, .outOfResources, .busy, .timedOut: temporaryFailure
        case .wrongStorageKey, .malformedData: dataError
        case .invalidArgument: usage
        default: software
        }
    }

    static func forKeychainError(_ code: KeychainError.Code) -> Int32 {
        switch code {
        // An invalidated item is gone, as iOS reports it (errSecItemNotFound).
        case .itemNotFound, .itemInvalidated: itemNotFound
        case .duplicateItem: duplicateItem
        case .invalidParameter: usage
        // The bytes on disk cannot be used here: damaged, foreign (another TPM) or from a newer version.
        case .decodingFailed, .tampered, .unsupportedVersion, .wrongTPM: dataError
        case .storeNotFound: noInput
        case .tpmUnavailable, .notAvailable, .biometryNotEnrolled: unavailable
        case .authenticationFailed, .unsafeFileSystem, .permissionDenied, .interactionNotAllowed, .userCanceled, .passcodeNotSet: permissionDenied
        case .lockout, .timedOut: temporaryFailure
        case .storageFailed: ioError
        default: software
        }
    }

    /// The table `--help` shows; kept next to the mapping it describes.
    static let helpText = [
        "Exit status: 0 success, 44 item not found, 45 duplicate item (as security),",
        "64 usage (also an argument that is not UTF-8, a directory that is not a store),",
        "65 unusable data (damaged or modified files, a store sealed by another TPM),",
        "66 no keychain store at the path, 69 TPM unavailable, 70 internal error, 74 I/O error,",
        "75 temporary failure (TPM lockout; a TPM or lock that did not answer within",
        "TPM_KEYCHAIN_TIMEOUT seconds, default 30), 77 permission (permission denied, wrong passcode,",
        "keychain locked, no passcode set, prompt cancelled, unsafe file modes); an item invalidated by an",
        "enrollment or passcode change is 44 (it is gone); a command killed by a signal exits with that signal.",
    ].joined(separator: " ")
}

/// `security`'s wording, which scripts written for macOS match on.
enum SecurityMessage {
    static let itemNotFound = "The specified item could not be found in the keychain."
    static let duplicateItem = "The specified item already exists in the keychain."
}

/// A failure of the CLI itself (locks, directories, input), with the exit status it maps to.
struct CommandFailure: Error, CustomStringConvertible {
    let status: Int32
    let description: String

    init(_ status: Int32, _ description: String) {
        self.status = status
        self.description = description
    }
}

/// Writes to standard error, where every diagnostic goes (standard output carries results only).
func printError(_ message: String) {
    FileHandle.standardError.write(Data((message + "\n").utf8))
}

/// Milliseconds with two decimals.
func milliseconds(_ duration: Duration) -> String {
    let value = Double(duration.components.seconds) * 1000 + Double(duration.components.attoseconds) / 1e15
    return String(format: "%.2f ms", value)
}

/// What to do about a lockout: a simulated TPM only runs while a command does, so it never
/// accumulates the uptime a hardware TPM needs to forget failures by itself.
let lockoutAdvice = """
    tpm-keychain: a simulated TPM (and any TPM whose lockout hierarchy has no password) is unlocked \
    with: tpm-keychain reset-lockout --keychain <store>. A hardware TPM forgets one failure per \
    recovery interval while it runs (tpm-keychain tpm-status shows both).
    """

/// Runs a command body, turning the project's typed errors into a message and an exit status.
///
/// The status is thrown as `ExitCode` rather than passed to `exit()`, so every `defer` between
/// here and the failure has run (the embedded simulator is stopped, locks are released) before
/// ArgumentParser ends the process.
func reportingErrors(_ body: () throws -> Void) throws {
    do {
        try body()
    } catch let error as KeychainError {
        switch error.code {
        case .itemNotFound: printError(SecurityMessage.itemNotFound)
        case .duplicateItem: printError(SecurityMessage.duplicateItem)
        case .lockout: printError("tpm-keychain: \(error)\n\(lockoutAdvice)")
        default: printError("tpm-keychain: \(error)")
        }
        throw ExitCode(ExitStatus.forKeychainError(error.code))
    } catch let error as TPMError {
        printError("tpm-keychain: \(error)" + (error.code == .lockout ? "\n" + lockoutAdvice : ""))
        throw ExitCode(ExitStatus.forTPMError(error.code))
    } catch let error as SoftwareTPMError {
        printError("tpm-keychain: cannot start the embedded TPM simulator: \(error)")
        throw ExitCode(ExitStatus.unavailable)
    } catch let failure as CommandFailure {
        printError("tpm-keychain: \(failure)")
        throw ExitCode(failure.status)
    }
}


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
    static let unavailable: Int32 = 69
    static let software: Int32 = 70
    static let ioError: Int32 = 74
    static let temporaryFailure: Int32 = 75
    static let permissionDenied: Int32 = 77

    static func forTPMError(_ code: TPMError.Code) -> Int32 {
        switch code {
        case .tpmUnavailable, .busy: unavailable
        case .authorizationFailed, .policyCheckFailed: permissionDenied
        case .lockout, .outOfResources: temporaryFailure
        case .wrongStorageKey, .malformedData: dataError
        case .invalidArgument: usage
        default: software
        }
    }

    static func forKeychainError(_ code: KeychainError.Code) -> Int32 {
        switch code {
        case .itemNotFound: itemNotFound
        case .duplicateItem: duplicateItem
        case .invalidParameter: usage
        // The bytes on disk cannot be used here: damaged, foreign (another TPM) or from a newer version.
        case .decodingFailed, .tampered, .unsupportedVersion, .wrongTPM: dataError
        case .tpmUnavailable: unavailable
        case .authenticationFailed, .unsafeFileSystem: permissionDenied
        case .lockout: temporaryFailure
        case .storageFailed: ioError
        case .storeClosed: software
        }
    }
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
        default: printError("tpm-keychain: \(error)")
        }
        throw ExitCode(ExitStatus.forKeychainError(error.code))
    } catch let error as TPMError {
        printError("tpm-keychain: \(error)")
        throw ExitCode(ExitStatus.forTPMError(error.code))
    } catch let error as SoftwareTPMError {
        printError("tpm-keychain: cannot start the embedded TPM simulator: \(error)")
        throw ExitCode(ExitStatus.unavailable)
    } catch let failure as CommandFailure {
        printError("tpm-keychain: \(failure)")
        throw ExitCode(failure.status)
    }
}


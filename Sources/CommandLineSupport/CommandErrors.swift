import ArgumentParser
import TPM
import TPMKeychain
import TPMSimulator
import ToolSupport

/// `security`'s wording, which scripts written for macOS match on.
package enum SecurityMessage {
    package static let itemNotFound = "The specified item could not be found in the keychain."
    package static let duplicateItem = "The specified item already exists in the keychain."
}

/// A failure of the CLI itself (locks, directories, input), with the exit status it maps to.
package struct CommandFailure: ToolFailure {
    package let status: Int32
    package let description: String

    package init(_ status: Int32, _ description: String) {
        self.status = status
        self.description = description
    }

    package var exitStatus: Int32 { status }
}

/// Runs a command body, turning the project's typed errors into a message and an exit status.
///
/// The status is thrown as `ExitCode` rather than passed to `exit()`, so every `defer` between
/// here and the failure has run (the embedded simulator is stopped, locks are released) before
/// ArgumentParser ends the process.
package func reportingErrors(_ body: () throws -> Void) throws {
    do {
        try body()
    } catch {
        guard let status = CommandErrorReport.status(reporting: error) else { throw error }
        throw ExitCode(status)
    }
}

/// The message and exit status of each of the project's typed errors.
package enum CommandErrorReport {
    /// Prints `error`'s message and returns its exit status; nil for an error that is not the
    /// project's (ArgumentParser reports those itself).
    package static func status(reporting error: any Error) -> Int32? {
        switch error {
        case let error as KeychainError:
            switch error.code {
            case .itemNotFound: printError(SecurityMessage.itemNotFound)
            case .duplicateItem: printError(SecurityMessage.duplicateItem)
            default:
                printError(
                    "tpm-keychain: \(error)" + (Remedy.forKeychainError(error).map { "\ntpm-keychain: \($0)" } ?? ""))
            }
            return ExitStatus.forKeychainError(error.code)
        case let error as TPMError:
            printError("tpm-keychain: \(error)" + (error.code == .lockout ? "\ntpm-keychain: \(Remedy.lockout)" : ""))
            return ExitStatus.forTPMError(error.code)
        case let error as SoftwareTPMError:
            printError("tpm-keychain: cannot start the embedded TPM simulator: \(error)")
            return ExitStatus.unavailable
        case let failure as any ToolFailure:
            printError("tpm-keychain: \(failure)")
            return failure.exitStatus
        default:
            return nil
        }
    }
}

import ArgumentParser
import ForeignImport
import FoundationEssentials
import TPM
import TPMKeychain
import TPMSimulator
import ToolSupport

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

/// Milliseconds with two decimals.
func milliseconds(_ duration: Duration) -> String {
    let value = Double(duration.components.seconds) * 1000 + Double(duration.components.attoseconds) / 1e15
    let hundredths = Int((value * 100).rounded())
    let fraction = String(hundredths % 100)
    return "\(hundredths / 100).\(fraction.count == 1 ? "0" + fraction : fraction) ms"
}

/// What to do about a lockout: a simulated TPM only runs while a command does, so it never
/// accumulates the uptime a hardware TPM needs to forget failures by itself.
/// Runs a command body, turning the project's typed errors into a message and an exit status.
///
/// The status is thrown as `ExitCode` rather than passed to `exit()`, so every `defer` between
/// here and the failure has run (the embedded simulator is stopped, locks are released) before
/// ArgumentParser ends the process.
func reportingErrors(_ body: () throws -> Void) throws {
    do {
        try body()
    } catch {
        guard let status = CommandErrorReport.status(reporting: error) else { throw error }
        throw ExitCode(status)
    }
}

/// The message and exit status of each of the project's typed errors.
enum CommandErrorReport {
    /// Prints `error`'s message and returns its exit status; nil for an error that is not the
    /// project's (ArgumentParser reports those itself).
    static func status(reporting error: any Error) -> Int32? {
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
        case let failure as CommandFailure:
            printError("tpm-keychain: \(failure)")
            return failure.status
        case let error as ForeignImportError:
            printError("tpm-keychain: \(error)")
            switch error.code {
            case .unreadableSource: return ExitStatus.noInput
            case .toolUnavailable: return ExitStatus.unavailable
            default: return ExitStatus.dataError
            }
        default:
            return nil
        }
    }
}

import ArgumentParser
import Foundation
import TPM
import TPMSimulator

/// Exit statuses, following sysexits(3) where one fits.
enum ExitStatus {
    static let usage: Int32 = 64
    static let dataError: Int32 = 65
    static let unavailable: Int32 = 69
    static let software: Int32 = 70
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
func reportingErrors(_ body: () throws -> Void) throws {
    do {
        try body()
    } catch let error as TPMError {
        printError("tpm-keychain: \(error)")
        throw ExitCode(ExitStatus.forTPMError(error.code))
    } catch let error as SoftwareTPMError {
        printError("tpm-keychain: \(error)")
        throw ExitCode(ExitStatus.unavailable)
    }
}

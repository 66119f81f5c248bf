import ArgumentParser
import Foundation
import SystemCalls
import ToolSupport

#if canImport(Glibc)
import Glibc
#endif

/// `tpm-keychain secret-service ...`: handed over, arguments and all, to
/// `tpm-keychain-secret-service` beside this binary (exec: same process, same descriptors), so
/// that the CLI people run for each lookup does not carry the daemon and D-Bus.
struct SecretServiceCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "secret-service",
        abstract:
            "The desktop's Secret Service (org.freedesktop.secrets): serve the stores, or import another provider's items.",
        discussion: "Runs tpm-keychain-secret-service, installed beside tpm-keychain; see its --help.")

    @Argument(parsing: .captureForPassthrough, help: "serve (the default) or import, and their options.")
    var arguments: [String] = []

    static let executableName = "tpm-keychain-secret-service"

    func run() throws {
        let path = Self.besideThisBinary(Self.executableName)
        var argv = ([path] + arguments).map { strdup($0) }
        argv.append(nil)
        execv(path, argv)
        let reason = Errno.current
        printError(
            "tpm-keychain: secret-service runs \(path), which \(reason.rawValue == ENOENT ? "is not installed" : "cannot start: \(reason)"): install it beside tpm-keychain (Scripts/install-cli.sh does)"
        )
        throw ExitCode(ExitStatus.unavailable)
    }

    /// `name` in the directory of this process's executable.
    static func besideThisBinary(_ name: String) -> String {
        let executable =
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        return URL(fileURLWithPath: executable).deletingLastPathComponent().appendingPathComponent(name).path
    }
}

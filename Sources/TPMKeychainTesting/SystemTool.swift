package import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Runs a system administration tool the project's own tests need (mount, useradd, ...) and
/// requires it to succeed. Package-only: users' tests have their own.
package enum SystemTool {
    package struct Failure: Error, CustomStringConvertible {
        package let description: String
    }

    /// Runs `executable` with `arguments`, waiting for it.
    ///
    /// - Throws: ``Failure`` naming the command when it exits with anything but 0, or what
    ///   starting it throws.
    package static func run(_ executable: String, _ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw Failure(
                description:
                    "\(executable) \(arguments.joined(separator: " ")) exited with \(process.terminationStatus)")
        }
    }

    /// Runs `executable` with `arguments` (and `environment` added to this process's), feeding it
    /// `input`, and returns its standard output. Standard error is kept for the failure message.
    ///
    /// - Throws: ``Failure`` with the command and its standard error when it exits with anything
    ///   but 0, or what starting it throws.
    package static func output(
        _ executable: String, _ arguments: [String], environment: [String: String] = [:], input: Data = Data()
    ) throws -> Data {
        let scratch = NSTemporaryDirectory() + "tpm-keychain-tool-" + UUID().uuidString
        try FileManager.default.createDirectory(
            atPath: scratch, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        // Files, not pipes: a tool that writes much to one while the other fills would block.
        try input.write(to: URL(fileURLWithPath: scratch + "/stdin"))
        _ = FileManager.default.createFile(atPath: scratch + "/stdout", contents: nil)
        _ = FileManager.default.createFile(atPath: scratch + "/stderr", contents: nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        process.standardInput = try FileHandle(forReadingFrom: URL(fileURLWithPath: scratch + "/stdin"))
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: scratch + "/stdout"))
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: scratch + "/stderr"))
        try process.run()
        process.waitUntilExit()
        let output = try Data(contentsOf: URL(fileURLWithPath: scratch + "/stdout"))
        guard process.terminationStatus == 0 else {
            let errors = (try? String(contentsOfFile: scratch + "/stderr", encoding: .utf8)) ?? ""
            throw Failure(
                description:
                    "\(executable) \(arguments.joined(separator: " ")) exited with \(process.terminationStatus): \(errors)"
            )
        }
        return output
    }

    /// Copies the executable at `source` to `path` (mode 0755), for other users to run: the
    /// build directory may be private to root. Written through a close-on-exec descriptor:
    /// through an inheritable one, a child another test forks meanwhile would hold the file open
    /// for writing, and running the copy would fail with ETXTBSY.
    package static func copyExecutable(_ source: String, to path: String) throws {
        let bytes = try Data(contentsOf: URL(fileURLWithPath: source))
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o755)
        guard descriptor >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        defer { close(descriptor) }
        var written = 0
        try bytes.withUnsafeBytes { raw in
            while written < raw.count {
                let count = write(descriptor, raw.baseAddress! + written, raw.count - written)
                if count < 0 && errno == EINTR { continue }
                guard count > 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
                written += count
            }
        }
        guard fchmod(descriptor, 0o755) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
    }
}

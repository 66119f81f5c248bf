import Foundation

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
}

import Foundation

/// Runs tpm2-tools (`tpm2_getcap`, `tpm2_createprimary`, ...) against a TPM, to cross-check from
/// outside what code under test did to it.
public enum TPM2Tools {
    /// A finished tool run.
    public struct Result: Sendable {
        /// The exit status.
        public let status: Int32
        /// What the tool wrote to standard output.
        public let output: String
        /// What the tool wrote to standard error.
        public let errorOutput: String
    }

    /// Runs `arguments` (the tool name first) with `TPM2TOOLS_TCTI` set to `tcti`, feeding `input`
    /// to its standard input (for options such as `--unique-data -`).
    ///
    /// tpm2-tools exit by themselves, so Foundation.Process is fine here (unlike for swtpm,
    /// which must be stopped by signal).
    /// - Throws: if the process cannot be started (tpm2-tools missing: `apt-get install tpm2-tools`).
    public static func run(
        _ arguments: [String], tcti: String, workingDirectory: String? = nil,
        input: [UInt8] = []
    ) throws -> Result {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = arguments
        var environment = ProcessInfo.processInfo.environment
        environment["TPM2TOOLS_TCTI"] = tcti
        process.environment = environment
        if let workingDirectory { process.currentDirectoryURL = URL(fileURLWithPath: workingDirectory) }
        let output = Pipe()
        let errorOutput = Pipe()
        process.standardOutput = output
        process.standardError = errorOutput
        let standardInput = Pipe()
        process.standardInput = standardInput
        try process.run()
        // Small inputs fit the pipe buffer, so writing before reading cannot deadlock.
        standardInput.fileHandleForWriting.write(Data(input))
        try standardInput.fileHandleForWriting.close()
        // Read before waiting so a chatty tool cannot fill the pipe and block.
        let outputData = output.fileHandleForReading.readDataToEndOfFile()
        let errorData = errorOutput.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return Result(
            status: process.terminationStatus,
            output: String(decoding: outputData, as: UTF8.self),
            errorOutput: String(decoding: errorData, as: UTF8.self))
    }
}

package import ArgumentParser
import FoundationEssentials
import SystemCalls
package import TPMKeychain
package import ToolSupport

#if canImport(Glibc)
import Glibc
#endif

/// `--passcode-fd N`: where a non-interactive caller gives the device passcode.
package struct PasscodeOptions: ParsableArguments {
    package init() {}

    @Option(
        name: .customLong("passcode-fd"),
        help: ArgumentHelp(
            "Read passcodes from this file descriptor, one per line (for change-passcode: the old, then the new). Without it: TPM_KEYCHAIN_ASKPASS, else the terminal (no echo), else standard input.",
            valueName: "fd"))
    package var passcodeDescriptor: Int32?
}

/// The device passcode, from (in order) a file descriptor, an askpass program, the terminal with
/// echo off, or standard input. It is never taken from argv, where every local user can read it.
package final class PasscodeInput: @unchecked Sendable {
    /// An askpass program, as ssh's SSH_ASKPASS: run with the prompt as its argument, it prints
    /// the passcode on standard output.
    package static let askpassVariable = "TPM_KEYCHAIN_ASKPASS"

    private let descriptor: Int32?
    /// Passcodes read from the descriptor and not used yet, in zeroized memory.
    private var lines: [SecretBytes]?

    package init(_ options: PasscodeOptions) {
        descriptor = options.passcodeDescriptor
    }

    /// Another secret read the same way (a recovery key): from `descriptor`, else askpass or the terminal.
    package init(descriptor: Int32?) {
        self.descriptor = descriptor
    }

    /// One passcode. - Throws: ``CommandFailure`` when there is none to read, or it is empty.
    package func read(prompt: String) throws(CommandFailure) -> SecretBytes {
        var data: [UInt8]
        if let descriptor {
            if lines == nil { lines = try Self.readLines(descriptor) }
            guard let first = lines?.first else {
                throw CommandFailure(
                    ExitStatus.usage, "file descriptor \(descriptor) has no more passcodes (one per line)")
            }
            lines?.removeFirst()
            return first
        } else if let askpass = ProcessInfo.processInfo.environment[Self.askpassVariable], !askpass.isEmpty {
            data = try Self.runAskpass(askpass, prompt: prompt)
        } else {
            switch try PasswordInput.read(prompt: prompt) {
            case .text(let text): data = Array(text.utf8)
            case .bytes(let bytes): data = Array(bytes)
            }
        }
        defer { erase(&data) }
        guard !data.isEmpty else { throw CommandFailure(ExitStatus.usage, "the passcode is empty") }
        return SecretBytes(copying: data)
    }

    /// The non-empty lines of `bytes` as secrets; `bytes` is overwritten with zeros afterwards.
    private static func secretLines(_ bytes: inout [UInt8]) -> [SecretBytes] {
        defer { for index in bytes.indices { bytes[index] = 0 } }
        return bytes.split(separator: UInt8(ascii: "\n")).map { line in
            line.withUnsafeBytes { SecretBytes(copying: $0) }
        }
    }

    private static func readLines(_ descriptor: Int32) throws(CommandFailure) -> [SecretBytes] {
        var data: [UInt8] = []
        data.reserveCapacity(64 << 10 + 4096) // one allocation: no copy of a passcode left behind by growth
        var buffer = [UInt8](repeating: 0, count: 4096)
        defer { for index in buffer.indices { buffer[index] = 0 } }
        while true {
            let count: Int
            do {
                count = try retryingInterrupts {
                    buffer.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, $0.count) }
                }
            } catch {
                throw CommandFailure(
                    ExitStatus.ioError, "cannot read passcodes from file descriptor \(descriptor): \(error)")
            }
            if count == 0 { break }
            data.append(contentsOf: buffer[0..<count])
            guard data.count <= 64 << 10 else {
                throw CommandFailure(ExitStatus.usage, "too much input on file descriptor \(descriptor)")
            }
        }
        return secretLines(&data)
    }

    private static func runAskpass(_ program: String, prompt: String) throws(CommandFailure) -> [UInt8] {
        var run: (termination: ChildProcess.Termination, output: [UInt8])
        do {
            // Its prompt goes to the terminal (stderr), its answer to us (stdout).
            run = try ChildProcess.run(
                program, arguments: [prompt], standardInput: .inherited, standardError: .inherited, limit: 64 << 10)
        } catch {
            throw CommandFailure(ExitStatus.unavailable, "cannot run \(askpassVariable) program \(program): \(error)")
        }
        defer { erase(&run.output) }
        guard run.termination == .exited(0) else {
            throw CommandFailure(
                ExitStatus.permissionDenied,
                "\(askpassVariable) program \(program) ended with \(run.termination): cancelled")
        }
        return run.output.last == UInt8(ascii: "\n") ? Array(run.output.dropLast()) : run.output
    }
}

/// Runs async library calls from a synchronous command: the command's thread waits (TPMKeychain's
/// ``SynchronousWait``).
package func waitFor<R: Sendable>(_ body: @escaping @Sendable () async throws -> R) throws -> R {
    try SynchronousWait.run { () async -> Result<R, any Error> in
        do { return .success(try await body()) } catch { return .failure(error) }
    }.get()
}

import Foundation
import TPMKeychainTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// One finished run of the `tpm-keychain` binary.
struct CLIResult: Sendable, CustomStringConvertible {
    let arguments: [String]
    /// The exit status, or the signal number when ``killedBySignal``.
    let status: Int32
    var killedBySignal = false
    let stdout: String
    let stderr: String

    /// The last line written to stderr: the error, after any note about a simulated TPM.
    var lastErrorLine: String {
        stderr.split(separator: "\n").last.map(String.init) ?? ""
    }

    var description: String {
        "tpm-keychain \(arguments.joined(separator: " ")) -> \(status)\n--- stdout\n\(stdout)--- stderr\n\(stderr)"
    }
}

/// Runs the built `tpm-keychain` executable as a user would: a separate process, its own
/// environment, output captured from files (a pipe could fill up and block it).
enum CLI {
    /// `tpm-keychain` is built next to the test bundle (`.build/<triple>/debug/`), since the test
    /// target depends on the executable target.
    static let executable: String = {
        let bundle =
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        return URL(fileURLWithPath: bundle).deletingLastPathComponent().appendingPathComponent("tpm-keychain").path
    }()

    /// Puts a copy of the tool at `path`, for other users to run (the build directory may be
    /// private to root). Written through a close-on-exec descriptor: through an inheritable one,
    /// any child another test spawns meanwhile would hold the copy open for writing, and running
    /// it would fail with ETXTBSY ("Text file busy"), as it once did in CI.
    static func install(at path: String) throws {
        try SystemTool.copyExecutable(executable, to: path)
    }

    /// The most a single CLI run may take before the test gives up on it and kills it: a bound
    /// on failure only, generous because a loaded two-core CI machine has stalled a run that
    /// takes a tenth of a second for more than 30 s.
    static let timeout: Duration = .seconds(120)

    /// - Parameters:
    ///   - environment: added to this process's environment, from which `TPM_KEYCHAIN_TCTI` is
    ///     removed first; a nil value removes a variable.
    ///   - stdin: fed to standard input; nil connects /dev/null.
    ///   - executable: what to run instead of `tpm-keychain` (a wrapper such as runuser, which
    ///     is given the tool's path among its arguments).
    static func run(
        _ arguments: [String], environment: [String: String?], stdin: Data? = nil,
        executable: String = CLI.executable
    ) throws -> CLIResult {
        let running = try start(arguments, environment: environment, stdinPipe: stdin != nil, executable: executable)
        if let stdin { try running.write(stdin, closing: true) }
        return try running.finish()
    }

    static func start(
        _ arguments: [String], environment: [String: String?], stdinPipe: Bool,
        executable: String = CLI.executable
    ) throws -> RunningCLI {
        guard FileManager.default.isExecutableFile(atPath: executable) else {
            throw CLIError("\(executable) is not there: run swift build --build-tests")
        }
        var merged = ProcessInfo.processInfo.environment
        merged.removeValue(forKey: "TPM_KEYCHAIN_TCTI")
        for (name, value) in environment { merged[name] = value }
        return try RunningCLI(executable: executable, arguments: arguments, environment: merged, stdinPipe: stdinPipe)
    }
}

struct CLIError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// A started CLI process, for tests that need to look at it while it runs.
final class RunningCLI: @unchecked Sendable {
    let arguments: [String]
    let process = Process()
    private let outputDirectory: String
    private let input: Pipe?

    fileprivate init(executable: String, arguments: [String], environment: [String: String], stdinPipe: Bool) throws {
        self.arguments = arguments
        outputDirectory = try makeScratchDirectory("cli-output")
        for name in ["stdout", "stderr"]
        where !FileManager.default.createFile(atPath: outputDirectory + "/" + name, contents: nil) {
            throw CLIError("cannot create \(outputDirectory)/\(name)")
        }
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.environment = environment
        process.standardOutput = FileHandle(forWritingAtPath: outputDirectory + "/stdout")
        process.standardError = FileHandle(forWritingAtPath: outputDirectory + "/stderr")
        input = stdinPipe ? Pipe() : nil
        process.standardInput = input ?? FileHandle.nullDevice
        try process.run()
    }

    var processIdentifier: Int32 { process.processIdentifier }

    func write(_ data: Data, closing: Bool) throws {
        guard let input else { throw CLIError("this run has no stdin pipe") }
        input.fileHandleForWriting.write(data)
        if closing { try input.fileHandleForWriting.close() }
    }

    /// What the process wrote to standard error so far.
    var standardErrorSoFar: String {
        (try? String(contentsOfFile: outputDirectory + "/stderr", encoding: .utf8)) ?? ""
    }

    /// Waits for the process (killing it after ``CLI/timeout``) and collects its output.
    func finish() throws -> CLIResult {
        let deadline = ContinuousClock.now + CLI.timeout
        while process.isRunning {
            if ContinuousClock.now > deadline {
                process.terminate()
                process.waitUntilExit()
                throw CLIError("tpm-keychain \(arguments.joined(separator: " ")) did not finish within \(CLI.timeout)")
            }
            usleep(2_000)
        }
        process.waitUntilExit()
        defer { try? FileManager.default.removeItem(atPath: outputDirectory) }
        let stdout = try String(contentsOfFile: outputDirectory + "/stdout", encoding: .utf8)
        let stderr = try String(contentsOfFile: outputDirectory + "/stderr", encoding: .utf8)
        return CLIResult(
            arguments: arguments, status: process.terminationStatus,
            killedBySignal: process.terminationReason == .uncaughtSignal, stdout: stdout, stderr: stderr)
    }
}

/// A fresh directory (mode 0700) under the temporary directory.
func makeScratchDirectory(_ name: String) throws -> String {
    let path = NSTemporaryDirectory() + "tpm-keychain-cli-tests-\(name)-\(UUID().uuidString)"
    try FileManager.default.createDirectory(
        atPath: path, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
    return path
}

/// A private swtpm (selected with TPM_KEYCHAIN_TCTI) and a store directory for one test; both
/// removed afterwards.
final class CLIFixture: @unchecked Sendable {
    let simulator: SoftwareTPM
    let directory: String
    /// Not created in advance: the CLI creates it.
    let store: String

    init() throws {
        simulator = try SoftwareTPM.start()
        directory = try makeScratchDirectory("store")
        store = directory + "/keychain"
    }

    /// The environment of every run: this fixture's TPM, and a private XDG data directory so a
    /// bug that ignores --keychain cannot touch the user's real store.
    var environment: [String: String?] {
        [
            "TPM_KEYCHAIN_TCTI": simulator.tcti, "XDG_DATA_HOME": directory + "/xdg-data",
            "XDG_STATE_HOME": directory + "/xdg-state",
        ]
    }

    /// Runs `verb --keychain <store> arguments...` against this fixture's TPM.
    func run(_ verb: String, _ arguments: String..., stdin: Data? = nil, tcti: String? = nil) throws -> CLIResult {
        var environment = environment
        if let tcti { environment["TPM_KEYCHAIN_TCTI"] = tcti }
        return try CLI.run([verb, "--keychain", store] + arguments, environment: environment, stdin: stdin)
    }

    /// As ``run(_:_:stdin:tcti:)``, recording an issue unless the command exits 0.
    @discardableResult
    func succeed(
        _ verb: String, _ arguments: String..., stdin: Data? = nil,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> CLIResult {
        let result = try CLI.run([verb, "--keychain", store] + arguments, environment: environment, stdin: stdin)
        #expect(result.status == 0, "\(result)", sourceLocation: sourceLocation)
        return result
    }

    deinit {
        simulator.stop()
        try? FileManager.default.removeItem(atPath: directory)
    }
}

enum SecurityMessages {
    static let itemNotFound = "The specified item could not be found in the keychain."
    static let duplicateItem = "The specified item already exists in the keychain."
}

/// The command lines of running swtpm processes (`pgrep -af "swtpm socket"`).
func runningSimulators() throws -> [String] {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = ["pgrep", "-af", "swtpm socket"]
    let output = Pipe()
    process.standardOutput = output
    try process.run()
    let data = output.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    // pgrep: 0 found, 1 none found; anything else means it did not work.
    guard process.terminationStatus <= 1 else {
        throw CLIError("pgrep failed with status \(process.terminationStatus)")
    }
    return String(decoding: data, as: UTF8.self).split(separator: "\n").map(String.init)
}

/// Every regular file under `directory`, recursively.
func regularFiles(under directory: String) -> [String] {
    guard let enumerator = FileManager.default.enumerator(atPath: directory) else { return [] }
    return enumerator.compactMap { $0 as? String }.map { directory + "/" + $0 }.filter {
        var status = stat()
        return lstat($0, &status) == 0 && status.st_mode & S_IFMT == S_IFREG
    }
}

func permissions(_ path: String) -> mode_t {
    var status = stat()
    guard lstat(path, &status) == 0 else { return 0o7777 }
    return status.st_mode & 0o7777
}

extension Data {
    func contains(_ needle: String) -> Bool {
        range(of: Data(needle.utf8)) != nil
    }
}

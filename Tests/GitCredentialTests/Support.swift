import Foundation
import SecurityCompat
import TPMKeychain
import TPMKeychainTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// One finished child process.
struct ProcessResult: Sendable, CustomStringConvertible {
    let command: String
    let status: Int32
    let stdout: String
    let stderr: String

    /// Standard output's lines, without the final newline's empty one.
    var lines: [String] {
        stdout.split(separator: "\n", omittingEmptySubsequences: false).dropLast(stdout.hasSuffix("\n") ? 1 : 0).map(
            String.init)
    }

    var description: String {
        "\(command) -> \(status)\n--- stdout\n\(stdout)--- stderr\n\(stderr)"
    }
}

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Runs a program to its end (killing it after `timeout`), output collected from files so a full
/// pipe cannot block it.
func runProcess(
    _ executable: String, _ arguments: [String], environment: [String: String], stdin: String? = nil,
    directory: String, timeout: Duration = .seconds(60)
) throws -> ProcessResult {
    let output = try makeScratchDirectory("output")
    defer { try? FileManager.default.removeItem(atPath: output) }
    for name in ["stdout", "stderr"] where !FileManager.default.createFile(atPath: output + "/" + name, contents: nil) {
        throw TestFailure("cannot create \(output)/\(name)")
    }
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    process.environment = environment
    process.currentDirectoryURL = URL(fileURLWithPath: directory)
    process.standardOutput = FileHandle(forWritingAtPath: output + "/stdout")
    process.standardError = FileHandle(forWritingAtPath: output + "/stderr")
    let input = Pipe()
    process.standardInput = stdin == nil ? FileHandle.nullDevice : input
    try process.run()
    if let stdin {
        input.fileHandleForWriting.write(Data(stdin.utf8))
        try input.fileHandleForWriting.close()
    }
    let command = ([executable] + arguments).joined(separator: " ")
    let deadline = ContinuousClock.now + timeout
    while process.isRunning {
        if ContinuousClock.now > deadline {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            throw TestFailure("\(command) did not finish within \(timeout)")
        }
        usleep(2_000)
    }
    process.waitUntilExit()
    return ProcessResult(
        command: command, status: process.terminationStatus,
        stdout: try String(contentsOfFile: output + "/stdout", encoding: .utf8),
        stderr: try String(contentsOfFile: output + "/stderr", encoding: .utf8))
}

/// A fresh directory (mode 0700) under the temporary directory.
func makeScratchDirectory(_ name: String) throws -> String {
    let path = NSTemporaryDirectory() + "git-credential-tests-\(name)-\(UUID().uuidString)"
    try FileManager.default.createDirectory(
        atPath: path, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
    return path
}

/// The first executable named `name` on PATH.
func executableOnPath(_ name: String) -> String? {
    let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
    return path.split(separator: ":").map { "\($0)/\(name)" }.first { FileManager.default.isExecutableFile(atPath: $0) }
}

/// Every regular file under `directory`, recursively.
func regularFiles(under directory: String) -> [String] {
    guard let enumerator = FileManager.default.enumerator(atPath: directory) else { return [] }
    return enumerator.compactMap { $0 as? String }.map { directory + "/" + $0 }.filter {
        var status = stat()
        return lstat($0, &status) == 0 && status.st_mode & S_IFMT == S_IFREG
    }
}

/// A private swtpm, a store directory (not created in advance), a private HOME and git
/// configuration, and an askpass program that answers as t/lib-credential.sh's does
/// (`askpass-username`, `askpass-password`) and records every prompt.
final class GitFixture: @unchecked Sendable {
    /// `git-credential-tpm-keychain`, built next to the test bundle (`.build/<triple>/debug/`)
    /// since this test target depends on the executable target.
    static let helper: String = {
        let bundle =
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        return URL(fileURLWithPath: bundle).deletingLastPathComponent().appendingPathComponent(
            "git-credential-tpm-keychain"
        ).path
    }()

    let simulator: SoftwareTPM
    let directory: String
    let store: String
    let home: String
    let git: String
    private let askpassLog: String

    init() throws {
        // A missing git is a failure of the run, as a missing swtpm is.
        guard let git = executableOnPath("git") else {
            throw TestFailure("git is not installed (Debian: apt-get install git)")
        }
        guard FileManager.default.isExecutableFile(atPath: Self.helper) else {
            throw TestFailure(
                "git-credential-tpm-keychain is not built at \(Self.helper): run swift build --build-tests")
        }
        self.git = git
        simulator = try SoftwareTPM.start()
        directory = try makeScratchDirectory("fixture")
        store = directory + "/keychain"
        home = directory + "/home"
        askpassLog = directory + "/askpass.log"
        try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
        try writeScript(
            "askpass",
            """
            #!/bin/sh
            echo "$1" >> '\(askpassLog)'
            what=$(echo $1 | cut -d" " -f1 | tr A-Z a-z | tr -cd a-z)
            echo "askpass-$what"
            """)
        guard FileManager.default.createFile(atPath: askpassLog, contents: nil) else {
            throw TestFailure("cannot create \(askpassLog)")
        }
    }

    deinit {
        simulator.stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Writes an executable script into the fixture's directory; returns its path.
    @discardableResult
    func writeScript(_ name: String, _ text: String) throws -> String {
        let path = directory + "/" + name
        try (text + "\n").write(toFile: path, atomically: true, encoding: .utf8)
        guard chmod(path, 0o700) == 0 else { throw TestFailure("chmod \(path) failed") }
        return path
    }

    /// Every run's environment: this fixture's TPM, a private HOME and XDG directories (so a bug
    /// that ignores --keychain cannot touch a real store), no system git configuration, and the
    /// askpass program instead of a terminal.
    var environment: [String: String] {
        var environment = ProcessInfo.processInfo.environment
        for name in environment.keys
        where name.hasPrefix("GIT_") || (name.hasPrefix("TPM_KEYCHAIN_") && name != "TPM_KEYCHAIN_TIMEOUT")
            || name.hasPrefix("XDG_")
        {
            environment.removeValue(forKey: name)
        }
        environment.removeValue(forKey: "SSH_ASKPASS")
        environment["HOME"] = home
        environment["XDG_CONFIG_HOME"] = directory + "/xdg-config"
        environment["XDG_DATA_HOME"] = directory + "/xdg-data"
        environment["XDG_STATE_HOME"] = directory + "/xdg-state"
        environment["GIT_CONFIG_NOSYSTEM"] = "1"
        environment["GIT_ASKPASS"] = directory + "/askpass"
        environment["GIT_TERMINAL_PROMPT"] = "0"
        environment["TPM_KEYCHAIN_TCTI"] = simulator.tcti
        return environment
    }

    /// `credential.helper` as a user would configure it: the helper's absolute path and
    /// `--keychain` (git runs it through the shell, appending the action). git takes a helper for
    /// a path only when the value starts with `/`, so quotes are left for the `!` form.
    var helperConfiguration: String {
        (Self.helper + store).contains(where: \.isWhitespace)
            ? "!'\(Self.helper)' --keychain '\(store)'" : "\(Self.helper) --keychain \(store)"
    }

    /// `git -c credential.helper=... <arguments>`, in the fixture's directory.
    func git(
        _ arguments: [String], stdin: String? = nil, configuration: [String] = [],
        environment extra: [String: String] = [:]
    ) throws -> ProcessResult {
        let options = (["credential.helper=" + helperConfiguration] + configuration).flatMap { ["-c", $0] }
        return try runProcess(
            git, options + arguments, environment: environment.merging(extra) { $1 }, stdin: stdin, directory: directory
        )
    }

    /// `git credential <action>` with `lines` as its input, recording an issue unless it exits 0.
    @discardableResult
    func credential(
        _ action: String, _ lines: [String], configuration: [String] = [],
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> ProcessResult {
        let result = try git(
            ["credential", action], stdin: lines.map { $0 + "\n" }.joined(), configuration: configuration)
        #expect(result.status == 0, "\(result)", sourceLocation: sourceLocation)
        return result
    }

    /// The helper itself, as git runs it, with `lines` on standard input.
    func helper(
        _ arguments: [String], _ lines: [String], environment extra: [String: String] = [:]
    ) throws -> ProcessResult {
        try runProcess(
            Self.helper, arguments, environment: environment.merging(extra) { $1 },
            stdin: lines.map { $0 + "\n" }.joined(),
            directory: directory)
    }

    /// `helper --keychain <store> <action>`, recording an issue unless it exits 0.
    @discardableResult
    func helper(
        _ action: String, _ lines: [String], sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> ProcessResult {
        let result = try helper(["--keychain", store, action], lines)
        #expect(result.status == 0, "\(result)", sourceLocation: sourceLocation)
        return result
    }

    /// Runs `body` with SecItem pointed at this fixture's store and the helper's access group, as
    /// other SecItem code would write into it. KeychainEnvironment is process-wide: one test at a
    /// time holds it.
    func withSecItemAccess<R>(_ body: (KeychainLocation) throws -> R) throws -> R {
        Self.secItemEnvironment.lock()
        defer { Self.secItemEnvironment.unlock() }
        let location = try KeychainLocation(path: store, tcti: simulator.tcti)
        KeychainEnvironment.location = location
        KeychainEnvironment.accessGroups = ["git-credential"]
        defer {
            Keychain.closeStore(location)
            KeychainEnvironment.reset()
        }
        return try body(location)
    }

    private static let secItemEnvironment = NSLock()

    /// The prompts askpass answered since the last call, which it then forgets.
    func takePrompts() throws -> [String] {
        let text = try String(contentsOfFile: askpassLog, encoding: .utf8)
        try Data().write(to: URL(fileURLWithPath: askpassLog))
        return text.split(separator: "\n").map(String.init)
    }
}

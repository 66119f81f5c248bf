import Foundation
import SystemCalls
import TPMKeychainTesting

#if canImport(Glibc)
import Glibc
#endif

/// One secret lookup as a whole process, next to the tools people use for the same job today:
///
/// - ours: `tpm-keychain find-generic-password -s S -a A -w --keychain DIR` (TPM_KEYCHAIN_TCTI)
/// - tpm2-tools: `tpm2_load` + `tpm2_unseal` of an object sealed once under an owner primary
/// - systemd: `systemd-creds decrypt` of a credential encrypted once `--with-key=tpm2`
///
/// and, with a session holder running (`tpm-keychain hold-session`, the warm path), the same
/// lookup and a git credential `get` (`git-credential-tpm-keychain`, TPM_KEYCHAIN_GIT_HELPER or
/// beside the CLI), which send no TPM command; once more through a proxy that holds each TPM
/// command back as a discrete TPM would (TPMLatencyProfile.discrete).
///
/// All of them talk to one swtpm this benchmark starts. Neither peer flushes what it loads, so
/// `tpm2_flushcontext -t`, `-l` and `-s` run between their runs, untimed; our CLI must leave the
/// TPM empty, which is checked with `tpm2_getcap`. The runs are interleaved (ours, tpm2-tools,
/// systemd-creds, ours, ...) so that drift falls on all three alike.
struct CLIBenchmarks {
    let summary: Summary
    let iterations: Int?

    func run() throws {
        // The shipped CLI is built by Scripts/release-build.sh (its own build directory); name it here.
        let executable = ProcessInfo.processInfo.environment["TPM_KEYCHAIN_CLI"] ?? siblingExecutable("tpm-keychain")
        guard FileManager.default.isExecutableFile(atPath: executable) else {
            print(
                "\n== CLI: build it first with `Scripts/release-build.sh --scratch-path .build-static --product tpm-keychain`"
            )
            return
        }
        print("CLI under test: \(executable)")
        let simulator = try SoftwareTPM.start()
        defer { simulator.stop() }
        let tcti = simulator.tcti
        let directory = try makeTemporaryDirectory("tpm-keychain-cli-bench")
        defer { removeTree(directory) }
        print("\n== CLI lookup as a whole process; swtpm \(tcti); files in \(directory)")

        let environment = ProcessInfo.processInfo.environment
        func with(_ extra: [String: String]) -> [String] {
            environment.merging(extra) { $1 }.map { "\($0)=\($1)" }
        }
        // Ours without a holder: the cold path, whatever holder this user may run.
        let ourEnvironment = with(["TPM_KEYCHAIN_TCTI": tcti, "TPM_KEYCHAIN_SESSION_HOLDER": ""])
        let holderSocket = directory + "/session.socket"
        let warmEnvironment = with(["TPM_KEYCHAIN_TCTI": tcti, "TPM_KEYCHAIN_SESSION_HOLDER": holderSocket])
        let toolsEnvironment = with(["TPM2TOOLS_TCTI": tcti])
        let password = "correct horse battery staple"

        // ours: one item in a store sealed to this swtpm.
        let store = directory + "/keychain"
        try expect(
            run(
                [
                    executable, "add-generic-password", "-s", "bench.cli", "-a", "alice", "-w", password, "--keychain",
                    store,
                ],
                environment: ourEnvironment), "tpm-keychain add-generic-password")
        let ours = [executable, "find-generic-password", "-s", "bench.cli", "-a", "alice", "-w", "--keychain", store]
        let ourOutput = try expect(run(ours, environment: ourEnvironment), "tpm-keychain find-generic-password")
        guard ourOutput.trimmingCharacters(in: .newlines) == password else {
            throw BenchmarkError("tpm-keychain printed \(ourOutput)")
        }

        // The warm path: a holder for the lookup and for a git credential stored once.
        let gitHelper =
            ProcessInfo.processInfo.environment["TPM_KEYCHAIN_GIT_HELPER"]
            ?? URL(fileURLWithPath: executable).deletingLastPathComponent().appendingPathComponent(
                "git-credential-tpm-keychain"
            ).path
        guard FileManager.default.isExecutableFile(atPath: gitHelper) else {
            throw BenchmarkError("no git helper at \(gitHelper): build it with Scripts/release-build.sh")
        }
        let credential = directory + "/credential"
        try Data("protocol=https\nhost=git.example\nusername=alice\npassword=\(password)\n\n".utf8).write(
            to: URL(fileURLWithPath: credential))
        try spawnQuietly(
            [gitHelper, "--keychain", store, "store"], environment: ourEnvironment, expecting: "git helper store",
            stdin: credential)
        let gitQuery = directory + "/git-query"
        try Data("protocol=https\nhost=git.example\n\n".utf8).write(to: URL(fileURLWithPath: gitQuery))
        let gitGet = [gitHelper, "--keychain", store, "get"]
        let holder = try SessionHolderProcess(
            executable: executable, socket: holderSocket, environment: warmEnvironment)
        defer { holder.stop() }
        guard try expect(run(ours, environment: warmEnvironment), "a warm lookup") == password + "\n" else {
            throw BenchmarkError("the warm lookup printed another secret")
        }

        // tpm2-tools: an owner-hierarchy primary (saved as a context file) and a sealed object under it.
        let tools = directory + "/tpm2"
        mkdir(tools, 0o700)
        try Data(password.utf8).write(to: URL(fileURLWithPath: tools + "/secret"))
        try expect(
            run(
                ["/usr/bin/env", "tpm2_createprimary", "-Q", "-C", "o", "-c", tools + "/primary.ctx"],
                environment: toolsEnvironment), "tpm2_createprimary")
        try expect(
            run(
                [
                    "/usr/bin/env", "tpm2_create", "-Q", "-C", tools + "/primary.ctx", "-i", tools + "/secret",
                    "-u", tools + "/sealed.pub", "-r", tools + "/sealed.priv",
                ], environment: toolsEnvironment), "tpm2_create")
        try flush(toolsEnvironment)
        let load = [
            "/usr/bin/env", "tpm2_load", "-Q", "-C", tools + "/primary.ctx", "-u", tools + "/sealed.pub", "-r",
            tools + "/sealed.priv",
            "-c", tools + "/sealed.ctx",
        ]
        let unseal = ["/usr/bin/env", "tpm2_unseal", "-c", tools + "/sealed.ctx"]
        try expect(run(load, environment: toolsEnvironment), "tpm2_load")
        guard try expect(run(unseal, environment: toolsEnvironment), "tpm2_unseal") == password else {
            throw BenchmarkError("tpm2_unseal printed other bytes")
        }
        try flush(toolsEnvironment)

        // systemd-creds: a credential sealed to the swtpm. systemd 252 takes the TCTI as
        // --tpm2-device=DRIVER:CONFIG and dlopens libtss2-tcti-DRIVER.so.0 with CONFIG.
        let credentials = directory + "/creds"
        mkdir(credentials, 0o700)
        try Data(password.utf8).write(to: URL(fileURLWithPath: credentials + "/plain"))
        let device = "--tpm2-device=swtpm:" + tcti.dropFirst("swtpm:".count)
        try expect(
            run(
                [
                    "/usr/bin/env", "systemd-creds", "encrypt", "--with-key=tpm2", device, credentials + "/plain",
                    credentials + "/bench",
                ],
                environment: toolsEnvironment), "systemd-creds encrypt")
        try flush(toolsEnvironment)
        let decrypt = ["/usr/bin/env", "systemd-creds", "decrypt", device, credentials + "/bench", "-"]
        guard try expect(run(decrypt, environment: toolsEnvironment), "systemd-creds decrypt") == password else {
            throw BenchmarkError("systemd-creds decrypt printed other bytes")
        }
        try flush(toolsEnvironment)

        // Spawn through the executables directly, not /usr/bin/env, for the timed runs.
        let resolvedLoad = [try which("tpm2_load")] + load.dropFirst(2)
        let resolvedUnseal = [try which("tpm2_unseal")] + unseal.dropFirst(2)
        let resolvedDecrypt = [try which("systemd-creds")] + decrypt.dropFirst(2)

        let count = iterations ?? 100
        let warmup = 5
        let clock = ContinuousClock()
        var ourTimes: [Duration] = []
        var toolTimes: [Duration] = []
        var credsTimes: [Duration] = []
        var warmTimes: [Duration] = []
        var gitTimes: [Duration] = []
        var leftovers: [String] = []
        for index in 0..<(warmup + count) {
            let our = try clock.measure {
                try spawnQuietly(ours, environment: ourEnvironment, expecting: "tpm-keychain")
            }
            let warm = try clock.measure {
                try spawnQuietly(ours, environment: warmEnvironment, expecting: "tpm-keychain, warm")
            }
            let git = try clock.measure {
                try spawnQuietly(
                    gitGet, environment: warmEnvironment, expecting: "git helper get, warm", stdin: gitQuery)
            }
            if index < warmup || index == warmup + count - 1 {
                let handles = try loadedHandles(toolsEnvironment)
                if !handles.isEmpty { leftovers.append(handles) }
            }
            let tool = try clock.measure {
                try spawnQuietly(resolvedLoad, environment: toolsEnvironment, expecting: "tpm2_load")
                try spawnQuietly(resolvedUnseal, environment: toolsEnvironment, expecting: "tpm2_unseal")
            }
            try flush(toolsEnvironment)
            let creds = try clock.measure {
                try spawnQuietly(resolvedDecrypt, environment: toolsEnvironment, expecting: "systemd-creds")
            }
            try flush(toolsEnvironment)
            if index >= warmup {
                ourTimes.append(our)
                toolTimes.append(tool)
                credsTimes.append(creds)
                warmTimes.append(warm)
                gitTimes.append(git)
            }
        }
        let oursSamples = Samples(ourTimes)
        summary.add(
            Figure(
                name: "CLI lookup: tpm-keychain find-generic-password -w", ours: oursSamples,
                floorName: "systemd-creds decrypt", floor: Samples(credsTimes), goal: 0.5))
        summary.add(
            Figure(
                name: "CLI lookup vs tpm2-tools", ours: oursSamples,
                floorName: "tpm2_load + tpm2_unseal", floor: Samples(toolTimes), goal: nil))
        summary.add(
            Figure(
                name: "CLI lookup, warm (a session holder runs)", ours: Samples(warmTimes),
                floorName: "systemd-creds decrypt", floor: Samples(credsTimes), goal: 0.3))
        summary.add(
            Figure(
                name: "git credential get, warm (goal: under 10 ms)", ours: Samples(gitTimes), floorName: nil,
                floor: nil, goal: nil))
        try discreteWarmLookup(ours, environment: with, simulator: simulator, count: count)
        if leftovers.isEmpty {
            print(
                "handles after our CLI (tpm2_getcap handles-transient, -loaded-session, -saved-session): none, checked \(warmup + 1) times"
            )
        } else {
            print("HANDLES LEFT BY OUR CLI: \(leftovers.joined(separator: "; "))")
        }
    }

    /// The warm lookup with the TPM reached through a proxy at a discrete TPM's pace: the holder's
    /// first read opens the store through it; the timed ones must send it nothing.
    private func discreteWarmLookup(
        _ lookup: [String], environment with: ([String: String]) -> [String], simulator: SoftwareTPM, count: Int
    ) throws {
        let proxy = try RecordingTPMProxy.start(forwardingTo: simulator.port, latency: .discrete)
        defer { proxy.stop() }
        let socket = try makeTemporaryDirectory("tpm-keychain-warm-discrete")
        defer { removeTree(socket) }
        let environment = with([
            "TPM_KEYCHAIN_TCTI": proxy.tcti, "TPM_KEYCHAIN_SESSION_HOLDER": socket + "/session.socket",
        ])
        let holder = try SessionHolderProcess(
            executable: lookup[0], socket: socket + "/session.socket", environment: environment)
        defer { holder.stop() }
        try spawnQuietly(lookup, environment: environment, expecting: "the holder's first lookup, discrete profile")
        proxy.reset()
        let clock = ContinuousClock()
        var times: [Duration] = []
        for _ in 0..<count {
            times.append(
                try clock.measure { try spawnQuietly(lookup, environment: environment, expecting: "warm, discrete") })
        }
        guard proxy.commandCount == 0 else {
            throw BenchmarkError("warm lookups sent \(proxy.commandCount) TPM commands")
        }
        print("warm lookups through the discrete profile's proxy: \(count), TPM commands sent: 0")
        summary.add(
            Figure(
                name: "CLI lookup, warm, discrete-TPM profile (goal: under 30 ms)", ours: Samples(times),
                floorName: nil, floor: nil, goal: nil))
    }

    /// What tpm2_getcap lists as loaded: transient objects, loaded and saved sessions.
    private func loadedHandles(_ environment: [String]) throws -> String {
        var found: [String] = []
        for capability in ["handles-transient", "handles-loaded-session", "handles-saved-session"] {
            let output = try expect(
                run(["/usr/bin/env", "tpm2_getcap", capability], environment: environment), "tpm2_getcap")
            let trimmed = output.trimmingCharacters(in: .whitespacesAndNewlines)
            if !trimmed.isEmpty { found.append("\(capability): \(trimmed.replacingOccurrences(of: "\n", with: " "))") }
        }
        return found.joined(separator: ", ")
    }

    /// Flushes what the peers leave behind (untimed): transient objects, loaded and saved sessions.
    private func flush(_ environment: [String]) throws {
        for flag in ["-t", "-l", "-s"] {
            try expect(
                run(["/usr/bin/env", "tpm2_flushcontext", flag], environment: environment), "tpm2_flushcontext \(flag)")
        }
    }

    private func which(_ name: String) throws -> String {
        for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":") {
            let path = "\(directory)/\(name)"
            if FileManager.default.isExecutableFile(atPath: path) { return path }
        }
        throw BenchmarkError("\(name) is not installed")
    }

    private struct Finished {
        let status: Int32
        let output: String
        let errorOutput: String
    }

    /// Runs a process to completion, capturing its output (untimed set-up and checks).
    private func run(_ arguments: [String], environment: [String]) throws -> Finished {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: arguments[0])
        process.arguments = Array(arguments.dropFirst())
        process.environment = Dictionary(
            environment.map { entry in
                let parts = entry.split(separator: "=", maxSplits: 1)
                return (String(parts[0]), parts.count > 1 ? String(parts[1]) : "")
            }, uniquingKeysWith: { $1 })
        let output = Pipe()
        let errorOutput = Pipe()
        process.standardOutput = output
        process.standardError = errorOutput
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let outputData = output.fileHandleForReading.readDataToEndOfFile()
        let errorData = errorOutput.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return Finished(
            status: process.terminationStatus, output: String(decoding: outputData, as: UTF8.self),
            errorOutput: String(decoding: errorData, as: UTF8.self))
    }

    @discardableResult
    private func expect(_ finished: Finished, _ what: String) throws -> String {
        guard finished.status == 0 else {
            throw BenchmarkError("\(what) failed (\(finished.status)): \(finished.errorOutput)")
        }
        return finished.output
    }
}

/// The path of an executable built next to this one.
func siblingExecutable(_ name: String) -> String {
    URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent(name).path
}

/// posix_spawn with standard input, output and error on /dev/null, then waitpid: the whole life
/// of a process as a caller (a shell, a script, a service manager) sees it.
func spawnQuietly(
    _ arguments: [String], environment: [String], expecting what: String, stdin: String = "/dev/null"
) throws {
    _ = try spawnAndWait(arguments, environment: environment, stdin: stdin, expecting: what)
}

/// `tpm-keychain hold-session` in the background, until ``stop()``.
struct SessionHolderProcess {
    let pid: pid_t

    /// Starts it and waits until its socket is there.
    init(executable: String, socket: String, environment: [String]) throws {
        let pid = try spawn([executable, "hold-session", "--socket", socket], environment: environment)
        self.pid = pid
        var status = stat()
        while stat(socket, &status) != 0 {
            guard kill(pid, 0) == 0 else { throw BenchmarkError("the session holder ended before it listened") }
            usleep(2_000)
        }
    }

    func stop() {
        kill(pid, SIGTERM)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0, errno == EINTR {}
    }
}

/// posix_spawn with standard input from `stdin` and output to `stdout` (created 0600), error on
/// /dev/null, then wait4: the process's resource usage (its peak RSS, `ru_maxrss`, in KiB).
///
/// - Throws: ``BenchmarkError`` when it cannot start, or does not exit 0.
func spawnAndWait(
    _ arguments: [String], environment: [String], stdin: String = "/dev/null", stdout: String = "/dev/null",
    expecting what: String
) throws -> rusage {
    let pid = try spawn(arguments, environment: environment, stdin: stdin, stdout: stdout)
    var status: Int32 = 0
    var usage = rusage()
    while wait4(pid, &status, 0, &usage) < 0 {
        guard errno == EINTR else { throw BenchmarkError("wait4 failed: errno \(errno)") }
    }
    // WIFEXITED and WEXITSTATUS, which Swift does not import as functions.
    guard status & 0x7F == 0, (status >> 8) & 0xFF == 0 else {
        throw BenchmarkError("\(what) failed: wait status \(status)")
    }
    return usage
}

/// posix_spawn of `arguments` with standard input from `stdin`, output to `stdout` (created
/// 0600) and error on /dev/null, and no other descriptor of this process; its pid.
///
/// - Throws: ``BenchmarkError`` when it cannot start.
func spawn(
    _ arguments: [String], environment: [String], stdin: String = "/dev/null", stdout: String = "/dev/null"
) throws -> pid_t {
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 0, stdin, O_RDONLY, 0)
    posix_spawn_file_actions_addopen(&actions, 1, stdout, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
    try closeInheritedDescriptors(&actions)
    let argv = arguments.map { strdup($0) } + [nil]
    let envp = environment.map { strdup($0) } + [nil]
    defer {
        for pointer in argv { free(pointer) }
        for pointer in envp { free(pointer) }
    }
    var pid: pid_t = 0
    let result = posix_spawn(&pid, arguments[0], &actions, nil, argv, envp)
    guard result == 0 else { throw BenchmarkError("cannot start \(arguments[0]): errno \(result)") }
    return pid
}

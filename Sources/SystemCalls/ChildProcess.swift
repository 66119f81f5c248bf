// posix_spawn, not Foundation.Process: a child started by Foundation.Process from a test worker
// thread inherits that thread's signal mask, and Swift Testing's workers may block SIGTERM, which
// would make the child ignore our orderly termination. We reset mask and dispositions explicitly.
// And Process is Foundation proper: a tool that uses it links CoreFoundation and ICU's data.

#if canImport(Glibc)
package import Glibc
#elseif canImport(Musl)
package import Musl
#endif

/// Children of this process: swtpm and its watchdog, gpg, an askpass program, loginctl.
package enum ChildProcess {
    /// Where the child's standard input comes from.
    package enum StandardInput {
        case devNull
        /// This process's own standard input, shared.
        case inherited
        /// `dup2`ed onto fd 0 in the child; the caller keeps and later closes its copy.
        case descriptor(Int32)
    }

    /// Where the child's standard output or error goes.
    package enum StandardOutput {
        case devNull
        /// This process's own stream, shared.
        case inherited
        /// A file, created or truncated, mode 0600.
        case file(String)
        /// `dup2`ed onto the stream in the child (a pipe's write end); the caller keeps and later
        /// closes its copy.
        case descriptor(Int32)
    }

    /// Spawns `executablePath` with a clean signal state, stdout to /dev/null, stderr to
    /// `standardErrorPath` (or /dev/null), and no descriptors above 2 inherited.
    ///
    /// - Throws: `Errno` from the posix_spawn family (ENOENT, EACCES, ...).
    package static func spawn(
        executablePath: String,
        arguments: [String],
        standardInput: StandardInput,
        standardErrorPath: String?
    ) throws(Errno) -> pid_t {
        try spawn(
            executablePath: executablePath, arguments: arguments, standardInput: standardInput,
            standardOutput: .devNull, standardError: standardErrorPath.map { .file($0) } ?? .devNull)
    }

    /// Spawns `executablePath` with a clean signal state, the given standard streams, and no
    /// descriptors above 2 inherited.
    ///
    /// - Parameter environment: `NAME=value` entries; nil for this process's, less what
    ///   ``ChildEnvironment/withheld`` keeps back.
    /// - Throws: `Errno` from the posix_spawn family (ENOENT, EACCES, ...).
    package static func spawn(
        executablePath: String,
        arguments: [String],
        environment: [String]? = nil,
        standardInput: StandardInput,
        standardOutput: StandardOutput,
        standardError: StandardOutput
    ) throws(Errno) -> pid_t {
        var actions = posix_spawn_file_actions_t()
        try spawnResult { posix_spawn_file_actions_init(&actions) }
        defer { posix_spawn_file_actions_destroy(&actions) }

        switch standardInput {
        case .devNull:
            try spawnResult { posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0) }
        case .inherited:
            break
        case .descriptor(let fd):
            // dup2 clears FD_CLOEXEC on the target, so the O_CLOEXEC pipe end survives exec as fd 0.
            try spawnResult { posix_spawn_file_actions_adddup2(&actions, fd, 0) }
        }
        for (stream, output) in [(Int32(1), standardOutput), (Int32(2), standardError)] {
            switch output {
            case .devNull:
                try spawnResult { posix_spawn_file_actions_addopen(&actions, stream, "/dev/null", O_WRONLY, 0) }
            case .inherited:
                break
            case .file(let path):
                try spawnResult {
                    posix_spawn_file_actions_addopen(&actions, stream, path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
                }
            case .descriptor(let fd):
                try spawnResult { posix_spawn_file_actions_adddup2(&actions, fd, stream) }
            }
        }
        // Other threads (parallel tests) may have descriptors without CLOEXEC open right now;
        // a child holding a copy of, say, a TSS's socket would keep it alive after close.
        try closeInheritedDescriptors(&actions)

        var attributes = posix_spawnattr_t()
        try spawnResult { posix_spawnattr_init(&attributes) }
        defer { posix_spawnattr_destroy(&attributes) }
        var noSignals = sigset_t()
        sigemptyset(&noSignals)
        var allSignals = sigset_t()
        sigfillset(&allSignals)
        try spawnResult { posix_spawnattr_setsigmask(&attributes, &noSignals) }
        try spawnResult { posix_spawnattr_setsigdefault(&attributes, &allSignals) }
        try spawnResult {
            posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        }

        let argv: [UnsafeMutablePointer<CChar>?] = ([executablePath] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        // Not `environ` as it is: the owner password stays in this process.
        let envp: [UnsafeMutablePointer<CChar>?] =
            (environment ?? ChildEnvironment.current()).map { strdup($0) } + [nil]
        defer { for pointer in envp { free(pointer) } }
        var pid = pid_t()
        try spawnResult { posix_spawn(&pid, executablePath, &actions, &attributes, argv, envp) }
        return pid
    }

    /// How a child ended.
    package enum Termination: Equatable, Sendable {
        case exited(Int32)
        case signaled(Int32)
    }

    /// Waits for `pid` to end and reaps it.
    ///
    /// - Throws: `Errno` ECHILD when `pid` is not a child of this process (or was reaped already).
    package static func waitForTermination(_ pid: pid_t) throws(Errno) -> Termination {
        var status: Int32 = 0
        _ = try retryingInterrupts { waitpid(pid, &status, 0) }
        // WIFEXITED and friends are macros Swift does not import.
        let signal = status & 0x7f
        return signal == 0 ? .exited((status >> 8) & 0xff) : .signaled(signal)
    }

    /// Runs `executablePath` to its end and returns how it ended with what it wrote on its
    /// standard output, at most `limit` bytes (a child that writes more is killed). The output
    /// is read as secrets are (``readToEnd(_:atMost:)``): the caller erases it when done.
    ///
    /// - Throws: `Errno` from pipe2 or posix_spawn.
    package static func run(
        _ executablePath: String, arguments: [String], environment: [String]? = nil,
        standardInput: StandardInput = .devNull, standardError: StandardOutput = .devNull, limit: Int = 1 << 20
    ) throws(Errno) -> (termination: Termination, output: [UInt8]) {
        let ends = try makeCloseOnExecPipe()
        let pid: pid_t
        do throws(Errno) {
            pid = try spawn(
                executablePath: executablePath, arguments: arguments, environment: environment,
                standardInput: standardInput, standardOutput: .descriptor(ends.write), standardError: standardError)
        } catch {
            closeDescriptor(ends.read)
            closeDescriptor(ends.write)
            throw error
        }
        // Our copy of the write end must go: if we kept it, the pipe would never see EOF.
        closeDescriptor(ends.write)
        defer { closeDescriptor(ends.read) }
        var output = readToEnd(ends.read, atMost: limit + 1)
        if output.count > limit { _ = kill(pid, SIGKILL) }
        do {
            return (try waitForTermination(pid), output)
        } catch {
            erase(&output)
            throw error
        }
    }

    /// Reaps `pid` if it has exited. Returns true when the child is gone (also when someone else
    /// already reaped it: ECHILD), false while it still runs.
    package static func reapIfExited(_ pid: pid_t) -> Bool {
        var status: Int32 = 0
        do {
            let result = try retryingInterrupts { waitpid(pid, &status, WNOHANG) }
            return result == pid
        } catch {
            return true // ECHILD: not our child (any more); nothing left to reap.
        }
    }

    /// Polls until `pid` has exited and was reaped, or `timeout` passed.
    package static func waitForExit(_ pid: pid_t, timeout: Duration) -> Bool {
        let deadline = ContinuousClock.now + timeout
        while true {
            if reapIfExited(pid) { return true }
            if ContinuousClock.now >= deadline { return false }
            sleep(for: .milliseconds(10))
        }
    }

    /// SIGKILL and a blocking reap: the end of every escalation, so no zombie or stray process
    /// remains and the PID cannot be recycled while we still hold it.
    package static func killAndReap(_ pid: pid_t) {
        _ = kill(pid, SIGKILL)
        var status: Int32 = 0
        _ = try? retryingInterrupts { waitpid(pid, &status, 0) }
    }

    /// Resolves a program name like a shell would: a name with a slash is taken as a path,
    /// otherwise each PATH entry is tried. Returns nil when no executable file is found.
    package static func resolveExecutable(_ name: String) -> String? {
        if name.contains("/") {
            return access(name, X_OK) == 0 ? name : nil
        }
        let path = getenv("PATH").map { String(cString: $0) } ?? "/usr/local/bin:/usr/bin:/bin"
        for directory in path.split(separator: ":", omittingEmptySubsequences: false) {
            let candidate = (directory.isEmpty ? "." : String(directory)) + "/" + name
            var info = stat()
            if stat(candidate, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG, access(candidate, X_OK) == 0 {
                return candidate
            }
        }
        return nil
    }
}

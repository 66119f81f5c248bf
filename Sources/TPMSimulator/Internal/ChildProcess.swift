// posix_spawn, not Foundation.Process: a child started by Foundation.Process from a test worker
// thread inherits that thread's signal mask, and Swift Testing's workers may block SIGTERM, which
// would make the child ignore our orderly termination. We reset mask and dispositions explicitly.

import SystemCalls

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

enum ChildProcess {
    /// Where the child's standard input comes from.
    enum StandardInput {
        case devNull
        /// `dup2`ed onto fd 0 in the child; the caller keeps and later closes its copy.
        case descriptor(Int32)
    }

    /// Spawns `executablePath` with a clean signal state, stdout to /dev/null, stderr to
    /// `standardErrorPath` (or /dev/null), and no descriptors above 2 inherited.
    ///
    /// - Throws: `Errno` from the posix_spawn family (ENOENT, EACCES, ...).
    static func spawn(
        executablePath: String,
        arguments: [String],
        standardInput: StandardInput,
        standardErrorPath: String?
    ) throws(Errno) -> pid_t {
        var actions = posix_spawn_file_actions_t()
        try spawnResult { posix_spawn_file_actions_init(&actions) }
        defer { posix_spawn_file_actions_destroy(&actions) }

        switch standardInput {
        case .devNull:
            try spawnResult { posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0) }
        case .descriptor(let fd):
            // dup2 clears FD_CLOEXEC on the target, so the O_CLOEXEC pipe end survives exec as fd 0.
            try spawnResult { posix_spawn_file_actions_adddup2(&actions, fd, 0) }
        }
        try spawnResult { posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0) }
        if let standardErrorPath {
            try spawnResult {
                posix_spawn_file_actions_addopen(
                    &actions, 2, standardErrorPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
            }
        } else {
            try spawnResult { posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0) }
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
        let envp: [UnsafeMutablePointer<CChar>?] = ChildEnvironment.current().map { strdup($0) } + [nil]
        defer { for pointer in envp { free(pointer) } }
        var pid = pid_t()
        try spawnResult { posix_spawn(&pid, executablePath, &actions, &attributes, argv, envp) }
        return pid
    }

    /// Reaps `pid` if it has exited. Returns true when the child is gone (also when someone else
    /// already reaped it: ECHILD), false while it still runs.
    static func reapIfExited(_ pid: pid_t) -> Bool {
        var status: Int32 = 0
        do {
            let result = try retryingInterrupts { waitpid(pid, &status, WNOHANG) }
            return result == pid
        } catch {
            return true // ECHILD: not our child (any more); nothing left to reap.
        }
    }

    /// Polls until `pid` has exited and was reaped, or `timeout` passed.
    static func waitForExit(_ pid: pid_t, timeout: Duration) -> Bool {
        let deadline = ContinuousClock.now + timeout
        while true {
            if reapIfExited(pid) { return true }
            if ContinuousClock.now >= deadline { return false }
            sleep(for: .milliseconds(10))
        }
    }

    /// SIGKILL and a blocking reap: the end of every escalation, so no zombie or stray process
    /// remains and the PID cannot be recycled while we still hold it.
    static func killAndReap(_ pid: pid_t) {
        _ = kill(pid, SIGKILL)
        var status: Int32 = 0
        _ = try? retryingInterrupts { waitpid(pid, &status, 0) }
    }

    /// Resolves a program name like a shell would: a name with a slash is taken as a path,
    /// otherwise each PATH entry is tried. Returns nil when no executable file is found.
    static func resolveExecutable(_ name: String) -> String? {
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

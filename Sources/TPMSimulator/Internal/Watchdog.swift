// Guarantees that no swtpm outlives this process, even when it is SIGKILLed or crashes and no
// atexit handler runs: a tiny shell blocks reading a pipe whose only write end we hold (O_CLOEXEC,
// so no other child inherits it). The kernel closes that end when we die, `read` sees EOF, and
// the shell SIGKILLs swtpm. For a private state directory it then also deletes that directory,
// which nobody else would clean up after an abrupt death.

import SystemCalls

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

struct Watchdog: Sendable {
    let pid: pid_t
    /// Closing this (or our death) fires the watchdog.
    let writeEnd: Int32

    /// The shell script; `$1` is swtpm's PID, the rest directories to delete afterwards.
    /// Values are passed as arguments, never spliced into the script, so no path needs quoting.
    /// The pause lets the kernel finish tearing swtpm down before its files are removed.
    static let script = #"read _; kill -KILL "$1"; shift; if [ $# -gt 0 ]; then sleep 1; rm -rf -- "$@"; fi"#

    /// Spawns a watchdog for `target`.
    ///
    /// - Parameters:
    ///   - target: swtpm's PID.
    ///   - directories: private directories (state, sockets) to delete after killing swtpm.
    /// - Throws: `Errno` from pipe2 or posix_spawn.
    static func guarding(_ target: pid_t, removing directories: [String]) throws(Errno) -> Watchdog {
        let ends = try makeCloseOnExecPipe()
        // Our copy of the read end must go: if we kept it, the pipe would never see EOF.
        defer { closeDescriptor(ends.read) }
        do throws(Errno) {
            let pid = try ChildProcess.spawn(
                executablePath: "/bin/sh",
                arguments: ["-c", script, "tpm-simulator-watchdog", String(target)] + directories,
                standardInput: .descriptor(ends.read),
                standardErrorPath: nil)
            return Watchdog(pid: pid, writeEnd: ends.write)
        } catch {
            closeDescriptor(ends.write)
            throw error
        }
    }

    /// Kills and reaps the watchdog *before* its target is stopped and reaped, so it can never
    /// fire at a PID the kernel has recycled; then releases the pipe.
    func disarm() {
        ChildProcess.killAndReap(pid)
        closeDescriptor(writeEnd)
    }
}

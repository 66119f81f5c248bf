import Crypto
import Foundation
import KeychainService
import SystemCalls
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A caller's identity as the kernel tells it (CallerIdentity over PinnedProcess), read of real
/// processes: a shell's child, a process under bubblewrap with a Flatpak's `/.flatpak-info`.
@Suite("caller identity from the kernel", .serialized)
struct CallerIdentityTests {
    /// `command` run by /bin/sh under a shell that stays (so that Foundation's Process keeps its
    /// watch): the shell, and the pid `command` wrote to `pidFile`, once that process runs
    /// /usr/bin/sleep (the command writes its pid, then execs sleep: read before, it is a shell).
    static func start(_ command: String, pidFile: String) throws -> (shell: Process, pid: Int32) {
        let shell = Process()
        shell.executableURL = URL(fileURLWithPath: "/bin/sh")
        shell.arguments = ["-c", command + "; exit $?"]
        shell.standardInput = FileHandle.nullDevice
        shell.standardOutput = FileHandle.nullDevice
        try shell.run()
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            let text = (try? String(contentsOfFile: pidFile, encoding: .utf8)) ?? ""
            if text.hasSuffix("\n"), let pid = Int32(text.dropLast()),
                executablePath(ofProcess: pid) == "/usr/bin/sleep"
            {
                return (shell, pid)
            }
            guard shell.isRunning else { break }
            usleep(10_000)
        }
        throw AgentTestError("\(command) did not start")
    }

    @Test(
        "a shell's child: its executable and that file's SHA-256, the chain up through this test, and nothing once it has ended"
    )
    func childOfAShell() throws {
        let directory = NSTemporaryDirectory() + "caller-identity-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let pidFile = directory + "/pid"
        // The shell's own child: sh writes its pid, then becomes sleep (exec keeps the pid).
        let (shell, pid) = try Self.start("/bin/sh -c 'echo $$ > \(pidFile); exec /bin/sleep 60'", pidFile: pidFile)
        let pinned = try #require(PinnedProcess(pid: pid))
        let identity = try #require(CallerIdentity.of(pinned, uid: getuid()))

        #expect(identity.process.executable == "/usr/bin/sleep", "\(identity)")
        let sleep = try Data(contentsOf: URL(fileURLWithPath: "/usr/bin/sleep"))
        #expect(identity.executableHash == Array(SHA256.hash(data: sleep)))
        // The inner shell became sleep; its parent is the shell this test started, then this process.
        #expect(identity.ancestors.first?.executable == URL(fileURLWithPath: "/bin/sh").resolvingSymlinksInPath().path)
        #expect(identity.ancestors.dropFirst().first?.pid == getpid(), "\(identity.ancestors)")
        #expect(identity.chain.hasSuffix(" → dash → sleep"), "\(identity.chain)")
        #expect(identity.details.hasPrefix("pid \(pid), via "), "\(identity.details)")
        #expect(identity.flatpakApplicationID == nil)

        kill(pid, SIGKILL)
        shell.waitUntilExit() // The shell has reaped sleep: its pid names nothing now.
        #expect(!pinned.isAlive)
        #expect(CallerIdentity.of(pinned, uid: getuid()) == nil, "facts read of an ended process are not kept")
        #expect(PinnedProcess(pid: pid) == nil)
    }

    @Test("a process under bubblewrap with a Flatpak's /.flatpak-info is known by its app id, read from its own root")
    func flatpakApplication() throws {
        let directory = NSTemporaryDirectory() + "caller-identity-flatpak-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try "[Application]\nname=org.example.Chat\nruntime=runtime/org.freedesktop.Platform/x86_64/24.08\n"
            .write(toFile: directory + "/flatpak-info", atomically: true, encoding: .utf8)
        let (shell, pid) = try Self.start(
            "/usr/bin/bwrap --tmpfs / --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib"
                + " --symlink usr/lib64 /lib64 --ro-bind \(directory)/flatpak-info /.flatpak-info --bind \(directory) /out"
                + " --proc /proc --dev /dev /bin/sh -c 'echo $$ > /out/pid; exec /bin/sleep 60'",
            pidFile: directory + "/pid")
        defer {
            kill(pid, SIGKILL)
            shell.waitUntilExit()
        }
        let pinned = try #require(PinnedProcess(pid: pid))
        let identity = try #require(CallerIdentity.of(pinned, uid: getuid()))
        #expect(identity.flatpakApplicationID == "org.example.Chat", "\(identity)")
        #expect(identity.details.contains("app \"org.example.Chat\""), "\(identity.details)")
    }

    @Test("the unit is the cgroup's last service or scope; a .flatpak-info's name is its [Application] group's")
    func parsing() {
        #expect(
            PinnedProcess.unit(
                inCgroups: "0::/user.slice/user-1000.slice/user@1000.service/app.slice/vscode.service\n")
                == "vscode.service")
        #expect(PinnedProcess.unit(inCgroups: "0::/user.slice/user-1000.slice/session-3.scope\n") == "session-3.scope")
        #expect(PinnedProcess.unit(inCgroups: "0::/\n") == nil)
        #expect(
            PinnedProcess.unit(inCgroups: "12:cpu:/system.slice/ssh.service\n") == nil, "cgroup v1 lines are not read")
        #expect(
            PinnedProcess.flatpakApplicationID(inInfo: "[Instance]\nname=wrong\n[Application]\n name = org.a.B \n")
                == "org.a.B")
        #expect(PinnedProcess.flatpakApplicationID(inInfo: "[Runtime]\nname=org.freedesktop.Platform\n") == nil)
    }
}

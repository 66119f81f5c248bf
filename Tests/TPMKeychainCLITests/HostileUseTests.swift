import Foundation
import TPM
import TPMKeychainTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Regressions for what hostile testing of the shipped CLI found: damaged stores, aliasing
/// names, misleading errors, leaks through core dumps, crashes and argv, hangs and squatting.
@Suite("hostile use of the CLI")
struct HostileUseTests {
    // MARK: Data loss and integrity

    @Test(
        "a store whose store.meta was deleted is reported damaged (65) by every verb, and add never seals a new key over it"
    )
    func deletedMetadata() throws {
        let fixture = try CLIFixture()
        try fixture.succeed("add-generic-password", "-s", "svc", "-a", "alice", "-w", "precious")
        let items = regularFiles(under: fixture.store + "/items2").filter { $0.hasSuffix(".item") }
        #expect(items.count == 1)
        let before = try items.map { try Data(contentsOf: URL(fileURLWithPath: $0)) }
        try FileManager.default.removeItem(atPath: fixture.store + "/store.meta")

        for arguments in [
            ["find-generic-password", "-s", "svc", "-a", "alice", "-w"], ["dump-keychain", "-d"],
            ["delete-generic-password", "-s", "svc", "-a", "alice"],
            ["add-generic-password", "-s", "svc", "-a", "bob", "-w", "x"],
        ] {
            let result = try CLI.run(
                [arguments[0], "--keychain", fixture.store] + arguments.dropFirst(), environment: fixture.environment)
            #expect(result.status == 65, "\(result)")
            #expect(result.lastErrorLine.contains("is damaged"), "\(result)")
            #expect(result.lastErrorLine.contains("store.meta"), "\(result)")
        }
        #expect(!FileManager.default.fileExists(atPath: fixture.store + "/store.meta"))
        #expect(try items.map { try Data(contentsOf: URL(fileURLWithPath: $0)) } == before)
    }

    @Test(
        "an item put back from an older copy, or deleted behind the tool's back, is a rollback (65) naming what happened; the whole store put back fails to open the same way; deleting the item accepts the loss"
    )
    func rolledBackFiles() throws {
        let fixture = try CLIFixture()
        try fixture.succeed("add-generic-password", "-s", "svc", "-a", "alice", "-w", "old")
        let file = try #require(regularFiles(under: fixture.store + "/items2").first { $0.hasSuffix(".item") })
        let older = try Data(contentsOf: URL(fileURLWithPath: file))
        let wholeStore = fixture.store + ".old"
        try FileManager.default.copyItem(atPath: fixture.store, toPath: wholeStore)
        defer { try? FileManager.default.removeItem(atPath: wholeStore) }
        try fixture.succeed("add-generic-password", "-U", "-s", "svc", "-a", "alice", "-w", "new")
        try older.write(to: URL(fileURLWithPath: file))

        let find = try CLI.run(
            ["find-generic-password", "--keychain", fixture.store, "-s", "svc", "-a", "alice", "-w"],
            environment: fixture.environment)
        #expect(find.status == 65, "\(find)")
        #expect(find.stdout.isEmpty && !find.stdout.contains("old"), "\(find)")
        #expect(find.stderr.contains("older copy"), "\(find)")
        let dump = try CLI.run(["dump-keychain", "--keychain", fixture.store], environment: fixture.environment)
        #expect(dump.status == 65, "\(dump)")

        try FileManager.default.removeItem(atPath: file)
        let missing = try CLI.run(
            ["find-generic-password", "--keychain", fixture.store, "-s", "svc", "-a", "alice", "-w"],
            environment: fixture.environment)
        #expect(missing.status == 65 && missing.stderr.contains("missing although"), "\(missing)")
        // The file was already gone: not found (44), as security says, and the loss is accepted.
        let delete = try CLI.run(
            ["delete-generic-password", "--keychain", fixture.store, "-s", "svc", "-a", "alice"],
            environment: fixture.environment)
        #expect(delete.status == 44, "\(delete)")
        let gone = try CLI.run(
            ["find-generic-password", "--keychain", fixture.store, "-s", "svc", "-a", "alice", "-w"],
            environment: fixture.environment)
        #expect(gone.status == 44, "\(gone)")

        // The whole store, from before the second process's write: older than the TPM counter.
        try FileManager.default.removeItem(atPath: fixture.store)
        try FileManager.default.copyItem(atPath: wholeStore, toPath: fixture.store)
        let restored = try CLI.run(
            ["find-generic-password", "--keychain", fixture.store, "-s", "svc", "-a", "alice", "-w"],
            environment: fixture.environment)
        #expect(restored.status == 65 && restored.stderr.contains("older than its TPM counter"), "\(restored)")
    }

    @Test("a renamed item file or swapped service directories are tampering (65) for find and delete, as for dump")
    func renamedAndSwapped() throws {
        let fixture = try CLIFixture()
        try fixture.succeed("add-generic-password", "-s", "svc.a", "-a", "alice", "-w", "a")
        try fixture.succeed("add-generic-password", "-s", "svc.b", "-a", "bob", "-w", "b")
        let files = regularFiles(under: fixture.store + "/items2").filter { $0.hasSuffix(".item") }.sorted()
        let directories = files.map { ($0 as NSString).deletingLastPathComponent }
        #expect(Set(directories).count == 2)

        // Swap the two service directories.
        try FileManager.default.moveItem(atPath: directories[0], toPath: directories[0] + ".x")
        try FileManager.default.moveItem(atPath: directories[1], toPath: directories[0])
        try FileManager.default.moveItem(atPath: directories[0] + ".x", toPath: directories[1])
        for arguments in [
            ["find-generic-password", "-s", "svc.a", "-a", "alice"],
            ["delete-generic-password", "-s", "svc.b", "-a", "bob"],
            ["dump-keychain"],
        ] {
            let result = try CLI.run(
                [arguments[0], "--keychain", fixture.store] + arguments.dropFirst(), environment: fixture.environment)
            #expect(result.status == 65, "\(result)")
        }
        // Swap back, then rename one file.
        try FileManager.default.moveItem(atPath: directories[0], toPath: directories[0] + ".x")
        try FileManager.default.moveItem(atPath: directories[1], toPath: directories[0])
        try FileManager.default.moveItem(atPath: directories[0] + ".x", toPath: directories[1])
        try fixture.succeed("find-generic-password", "-s", "svc.a", "-a", "alice", "-w")
        let renamed = directories[0] + "/00000000000000000000000000000000.item"
        try FileManager.default.moveItem(atPath: files[0], toPath: renamed)
        let accountOfFirst =
            try fixture.run("find-generic-password", "-s", "svc.a", "-a", "alice").status == 65 ? "alice" : "bob"
        let service = accountOfFirst == "alice" ? "svc.a" : "svc.b"
        for verb in ["find-generic-password", "delete-generic-password"] {
            let result = try fixture.run(verb, "-s", service, "-a", accountOfFirst)
            #expect(result.status == 65, "\(result)")
            #expect(result.lastErrorLine.contains("swapped or renamed"), "\(result)")
        }
        #expect(try fixture.run("dump-keychain").status == 65)
    }

    @Test(
        "an item file opened to the group or others, or owned by another user, and a service directory opened to others, are refused (77) by every verb that reads or rewrites the item, as by dump",
        .enabled(if: geteuid() == 0, "needs root: the test gives a file to another user"))
    func looseModesAndForeignOwnersRefusedEverywhere() throws {
        let fixture = try CLIFixture()
        try fixture.succeed("add-generic-password", "-s", "svc", "-a", "acct", "-w", "secret")
        let file = try #require(regularFiles(under: fixture.store + "/items2").first { $0.hasSuffix(".item") })
        let directory = (file as NSString).deletingLastPathComponent
        let verbs: [[String]] = [
            ["find-generic-password", "-s", "svc", "-a", "acct", "-w"],
            ["find-generic-password", "-s", "svc", "-a", "acct"],
            ["find-generic-password", "-s", "svc"],
            ["add-generic-password", "-s", "svc", "-a", "acct", "-w", "new", "-U"],
            ["delete-generic-password", "-s", "svc", "-a", "acct"], ["dump-keychain"],
        ]
        let unsafe: [(String, () -> Int32, () -> Int32)] = [
            ("file 0644", { chmod(file, 0o644) }, { chmod(file, 0o600) }),
            ("file 0640", { chmod(file, 0o640) }, { chmod(file, 0o600) }),
            ("file of nobody", { chown(file, 65534, gid_t.max) }, { chown(file, 0, gid_t.max) }),
            ("directory 0755", { chmod(directory, 0o755) }, { chmod(directory, 0o700) }),
            ("directory 0750", { chmod(directory, 0o750) }, { chmod(directory, 0o700) }),
        ]
        for (what, make, undo) in unsafe {
            #expect(make() == 0)
            for arguments in verbs {
                let result = try CLI.run(
                    [arguments[0], "--keychain", fixture.store] + arguments.dropFirst(),
                    environment: fixture.environment)
                #expect(result.status == 77, "\(what): \(result)")
            }
            #expect(undo() == 0)
        }
        #expect(try fixture.succeed("find-generic-password", "-s", "svc", "-a", "acct", "-w").stdout == "secret\n")
    }

    @Test(
        "damaged sealed-key bytes in store.meta are unusable data (65), not an unavailable TPM (69) or a refusal (77)")
    func damagedSealedKey() throws {
        let fixture = try CLIFixture()
        try fixture.succeed("add-generic-password", "-s", "svc", "-a", "alice", "-w", "x")
        let path = fixture.store + "/store.meta"
        let original = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        for position in [6, 7] + Array(stride(from: 40, to: original.count - 32, by: 23)) {
            var damaged = original
            damaged[position] ^= 0x10
            try Data(damaged).write(to: URL(fileURLWithPath: path))
            let result = try fixture.run("find-generic-password", "-s", "svc", "-a", "alice", "-w")
            #expect(result.status == 65, "byte \(position): \(result)")
        }
        try Data(original).write(to: URL(fileURLWithPath: path))
        try fixture.succeed("find-generic-password", "-s", "svc", "-a", "alice", "-w")
    }

    @Test("arguments that are not UTF-8 are refused (64): two such names never alias one item, and no store is created")
    func invalidUTF8Arguments() throws {
        let fixture = try CLIFixture()
        try fixture.succeed("add-generic-password", "-s", "svc", "-a", "alice", "-w", "x")
        func run(_ script: String) throws -> CLIResult {
            // The shell builds the bytes; Foundation's Process would need them as Swift strings.
            try CLI.runRaw(shell: script, environment: fixture.environment.merging(["STORE": fixture.store]) { $1 })
        }
        let add = try run(
            #"exec "$TPM_KEYCHAIN_CLI" add-generic-password --keychain "$STORE" -s "$(printf 'inv\377')" -a a -w one"#)
        #expect(add.status == 64, "\(add)")
        #expect(add.stderr.contains("is not valid UTF-8"), "\(add)")
        let find = try run(
            #"exec "$TPM_KEYCHAIN_CLI" find-generic-password --keychain "$STORE" -s "$(printf 'inv\376')" -a a -w"#)
        #expect(find.status == 64, "\(find)")
        let path = try run(
            #"exec "$TPM_KEYCHAIN_CLI" add-generic-password --keychain "$STORE-$(printf '\377')" -s s -a a -w x"#)
        #expect(path.status == 64, "\(path)")
        let siblings = try FileManager.default.contentsOfDirectory(atPath: fixture.directory)
        #expect(!siblings.contains { $0.hasPrefix("keychain-") }, "\(siblings)")
        #expect(
            try fixture.succeed("dump-keychain").stdout.components(separatedBy: "class: ").count == 2,
            "only alice's item")
    }

    @Test(
        "without /proc, where Swift cannot find a process's arguments, the CLI and the git helper stop (69) naming /proc, not a crash",
        .enabled(if: geteuid() == 0, "needs root: the test hides /proc in a mount namespace of its own"))
    func withoutProc() throws {
        let fixture = try CLIFixture()
        let helper = URL(fileURLWithPath: CLI.executable).deletingLastPathComponent()
            .appendingPathComponent("git-credential-tpm-keychain").path
        for (tool, arguments) in [(CLI.executable, "create-keychain \"$STORE-new\""), (helper, "get")] {
            let result = try CLI.runRaw(
                shell: #"exec unshare --mount sh -c 'mount -t tmpfs none /proc && exec "$0" "$@"' "$TOOL" "#
                    + arguments,
                environment: fixture.environment.merging(["TOOL": tool, "STORE": fixture.store]) { $1 })
            #expect(result.status == 69, "\(tool): \(result)")
            #expect(result.stderr.contains("/proc is not mounted"), "\(tool): \(result)")
        }
        #expect(!FileManager.default.fileExists(atPath: fixture.store + "-new"))
    }

    // MARK: Errors that mislead

    @Test("another user without access gets permission denied (77) naming the path, not 'not found'")
    func permissionDenied() throws {
        let fixture = try CLIFixture()
        try fixture.succeed("add-generic-password", "-s", "svc", "-a", "alice", "-w", "x")
        for arguments in [
            ["find-generic-password", "-s", "svc", "-a", "alice"],
            ["delete-generic-password", "-s", "svc", "-a", "alice"],
            ["dump-keychain", "-d"],
        ] {
            let result = try CLI.runRaw(
                executable: "/usr/bin/setpriv",
                arguments: [
                    "--reuid=65534", "--regid=65534", "--clear-groups", CLI.executable, arguments[0],
                    "--keychain", fixture.store,
                ] + arguments.dropFirst(),
                environment: fixture.environment.merging(["HOME": "/nonexistent"]) { $1 })
            #expect(result.status == 77, "\(result)")
            #expect(result.lastErrorLine.contains("Permission denied"), "\(result)")
            #expect(result.lastErrorLine.contains(fixture.store), "\(result)")
            #expect(result.stdout.isEmpty)
        }
        try fixture.succeed("find-generic-password", "-s", "svc", "-a", "alice")
    }

    // MARK: Secrets leaking

    @Test("the CLI runs with core dumps off, and a crash signal ends it with that signal, storing nothing")
    func coreDumpsAndCrashes() throws {
        let fixture = try CLIFixture()
        for crash in [SIGSEGV, SIGABRT] {
            let running = try CLI.start(
                ["add-generic-password", "--keychain", fixture.store, "-s", "svc", "-a", "crash-\(crash)"],
                environment: fixture.environment, stdinPipe: true)
            // Once the guard is in place (core limit 0, a handler caught for the signal), look.
            var limits = ""
            let deadline = ContinuousClock.now + .seconds(10)
            while ContinuousClock.now < deadline {
                let status =
                    (try? String(contentsOfFile: "/proc/\(running.processIdentifier)/status", encoding: .utf8)) ?? ""
                let caught =
                    status.split(separator: "\n").first { $0.hasPrefix("SigCgt:") }
                    .flatMap { UInt64($0.dropFirst("SigCgt:".count).trimmingCharacters(in: .whitespaces), radix: 16) }
                    ?? 0
                limits =
                    (try? String(contentsOfFile: "/proc/\(running.processIdentifier)/limits", encoding: .utf8)) ?? ""
                if caught & (1 << UInt64(crash - 1)) != 0 && caught & (1 << UInt64(SIGINT - 1)) != 0 { break }
                usleep(20_000)
            }
            let core = limits.split(separator: "\n").first { $0.hasPrefix("Max core file size") }.map(String.init) ?? ""
            #expect(
                core.split(separator: " ", omittingEmptySubsequences: true).dropFirst(4).prefix(2) == ["0", "0"],
                "\(core)")
            #expect(kill(running.processIdentifier, crash) == 0)
            let result = try running.finish()
            #expect(result.killedBySignal && result.status == crash, "\(result)")
            #expect(result.stderr.contains("terminated by a crash signal"), "\(result)")
        }
        #expect(!FileManager.default.fileExists(atPath: fixture.store + "/store.meta"), "nothing was stored")
    }

    @Test(
        "a password given with -w is overwritten in the command's own argv as it starts: another user reading /proc/PID/cmdline while the command runs does not see it, and the item stores the password given",
        .enabled(if: geteuid() == 0, "needs root: another user (nobody) reads the command line"))
    func passwordArgumentHiddenFromOtherUsers() throws {
        let fixture = try CLIFixture()
        try fixture.succeed("add-generic-password", "-s", "warm", "-a", "up", "-w", "x") // the store exists
        // The store's lock held: the next command waits, alive, once it has parsed its arguments.
        let root = open(fixture.store, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        #expect(root >= 0 && flock(root, LOCK_EX) == 0)
        let secret = "hunter2-the-secret-on-argv"
        let running = try CLI.start(
            ["add-generic-password", "--keychain", fixture.store, "-s", "svc", "-a", "argv", "-w", secret],
            environment: fixture.environment, stdinPipe: false)
        let deadline = ContinuousClock.now + .seconds(30)
        while !running.standardErrorSoFar.contains("warning: a password given with -w") && running.process.isRunning
            && ContinuousClock.now < deadline
        {
            usleep(5_000)
        }
        #expect(
            running.process.isRunning, "the command ended before the lock was released: \(running.standardErrorSoFar)")
        let seen = try CLI.run(
            ["-u", "nobody", "--", "/usr/bin/cat", "/proc/\(running.processIdentifier)/cmdline"], environment: [:],
            executable: "/usr/sbin/runuser")
        let commandLine = seen.stdout.replacingOccurrences(of: "\0", with: " ")
        #expect(commandLine.contains("add-generic-password") && commandLine.contains("-w"), "\(seen)")
        #expect(!commandLine.contains(secret), "another user read the password: \(commandLine)")
        #expect(flock(root, LOCK_UN) == 0)
        close(root)
        #expect(try running.finish().status == 0)
        #expect(try fixture.succeed("find-generic-password", "-s", "svc", "-a", "argv", "-w").stdout == secret + "\n")
    }

    @Test(
        "an inherited TSS2_LOG trace level is overridden (tpm2-tss's trace shows HMAC keys and decrypted responses) with a note; TPM_KEYCHAIN_DEBUG=1 lets it through"
    )
    func inheritedTSSTraceIsSilenced() throws {
        let fixture = try CLIFixture()
        let traced = fixture.environment.merging(["TSS2_LOG": "all+trace"]) { $1 }
        let added = try CLI.run(
            ["add-generic-password", "--keychain", fixture.store, "-s", "svc", "-a", "acct"], environment: traced,
            stdin: Data("secret-value\n".utf8))
        #expect(added.status == 0, "\(added)")
        let found = try CLI.run(
            ["find-generic-password", "--keychain", fixture.store, "-s", "svc", "-a", "acct", "-w"], environment: traced
        )
        #expect(found.stdout == "secret-value\n", "\(found)")
        for result in [added, found] {
            #expect(
                !result.stderr.contains("trace:") && !result.stderr.contains("debug:"),
                "tpm2-tss traced: \(result.stderr.prefix(400))")
            #expect(result.stderr.contains("TSS2_LOG=all+trace ignored"), "\(result)")
        }
        // The switch works: with it, tpm2-tss's trace reaches standard error (which is how the
        // overriding is known to matter).
        let debugging = traced.merging(["TPM_KEYCHAIN_DEBUG": "1"]) { $1 }
        let debugged = try CLI.run(
            ["find-generic-password", "--keychain", fixture.store, "-s", "svc", "-a", "acct", "-w"],
            environment: debugging)
        #expect(debugged.status == 0 && debugged.stderr.contains("trace:esys:"), "\(debugged.stderr.prefix(400))")
    }

    @Test("an askpass program is run without TPM_KEYCHAIN_OWNER_AUTH in its environment")
    func askpassGetsNoOwnerPassword() throws {
        let fixture = try CLIFixture()
        let script = fixture.directory + "/askpass"
        let dump = fixture.directory + "/askpass-environment"
        try "#!/bin/sh\nenv > '\(dump)'\necho 'passcode 4711'\n".write(
            toFile: script, atomically: true, encoding: .utf8)
        #expect(chmod(script, 0o700) == 0)
        // An empty owner password is the TPM's; the variable's value only has to reach this process.
        let environment = fixture.environment.merging([
            "TPM_KEYCHAIN_ASKPASS": script, "TPM_KEYCHAIN_OWNER_AUTH": "owner-secret-4711",
            "MARKER_FOR_TEST": "seen",
        ]) { $1 }
        _ = try CLI.run(["set-passcode", "--keychain", fixture.store], environment: environment)
        let seen = try String(contentsOfFile: dump, encoding: .utf8)
        #expect(seen.contains("MARKER_FOR_TEST=seen"), "\(seen)")
        #expect(!seen.contains("owner-secret-4711") && !seen.contains("TPM_KEYCHAIN_OWNER_AUTH"), "\(seen)")
    }

    @Test("a password given with -w draws a warning; one from standard input does not, and an empty one is refused")
    func passwordOnTheCommandLine() throws {
        let fixture = try CLIFixture()
        let warned = try fixture.succeed("add-generic-password", "-s", "svc", "-a", "argv", "-w", "x")
        #expect(
            warned.stderr.contains("warning: a password given with -w can be read by every local user"), "\(warned)")
        let quiet = try fixture.succeed("add-generic-password", "-s", "svc", "-a", "stdin", stdin: Data("y\n".utf8))
        #expect(quiet.stderr.isEmpty, "\(quiet)")

        let empty = try fixture.run("add-generic-password", "-s", "svc", "-a", "empty", stdin: Data("\n".utf8))
        #expect(empty.status == 64, "\(empty)")
        #expect(empty.lastErrorLine.contains("empty"), "\(empty)")
        #expect(try fixture.run("find-generic-password", "-s", "svc", "-a", "empty").status == 44)
        try fixture.succeed("add-generic-password", "-s", "svc", "-a", "empty", "--allow-empty", stdin: Data())
        #expect(try fixture.succeed("find-generic-password", "-s", "svc", "-a", "empty", "-w").stdout == "\n")
    }

    // MARK: Availability

    @Test("a stopped TPM fails find within TPM_KEYCHAIN_TIMEOUT (75), and a second command on the store is bounded too")
    func stoppedTPM() throws {
        let fixture = try CLIFixture()
        try fixture.succeed("add-generic-password", "-s", "svc", "-a", "alice", "-w", "x")
        #expect(kill(fixture.simulator.processID, SIGSTOP) == 0)
        defer { kill(fixture.simulator.processID, SIGCONT) }
        let environment = fixture.environment.merging(["TPM_KEYCHAIN_TIMEOUT": "2"]) { $1 }
        let started = ContinuousClock.now
        let commands = try (0..<2).map { _ in
            try CLI.start(
                ["find-generic-password", "--keychain", fixture.store, "-s", "svc", "-a", "alice", "-w"],
                environment: environment, stdinPipe: false)
        }
        for result in try commands.map({ try $0.finish() }) {
            #expect(result.status == 75, "\(result)")
            // The TPM's own deadline, the TPM access lock, or the store's open lock held by the
            // other command: each names what it waited for.
            #expect(
                result.stderr.contains("did not answer within") || result.stderr.contains("for longer than")
                    || result.stderr.contains("Waited 2.0 seconds for the lock on"), "\(result)")
            #expect(result.stdout.isEmpty)
        }
        #expect(ContinuousClock.now - started < .seconds(20))
        kill(fixture.simulator.processID, SIGCONT)
        #expect(try fixture.succeed("find-generic-password", "-s", "svc", "-a", "alice", "-w").stdout == "x\n")
    }

    @Test("a lock directory squatted in /tmp by another user does not deny service")
    func squattedLockDirectory() throws {
        let fixture = try CLIFixture()
        let squatted = "/tmp/tpm-keychain-\(getuid())"
        var created = false
        if access(squatted, F_OK) != 0 {
            #expect(mkdir(squatted, 0o777) == 0)
            #expect(chown(squatted, 65534, 65534) == 0)
            created = true
        }
        defer { if created { rmdir(squatted) } }
        let home = fixture.directory + "/home"
        let environment = fixture.environment.merging(["XDG_RUNTIME_DIR": nil, "XDG_CACHE_HOME": nil, "HOME": home]) {
            $1
        }
        try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
        let added = try CLI.run(
            ["add-generic-password", "--keychain", fixture.store, "-s", "svc", "-a", "a", "-w", "x"],
            environment: environment)
        #expect(added.status == 0, "\(added)")
        let found = try CLI.run(
            ["find-generic-password", "--keychain", fixture.store, "-s", "svc", "-a", "a", "-w"],
            environment: environment)
        #expect(found.stdout == "x\n", "\(found)")
        if created { #expect(try FileManager.default.contentsOfDirectory(atPath: squatted).isEmpty) }
    }
}

extension CLI {
    /// Runs `executable` with `arguments`, or with `shell` that /bin/sh script (with
    /// TPM_KEYCHAIN_CLI set to the CLI), in this process's environment plus `environment`
    /// (without TPM_KEYCHAIN_TCTI unless given).
    static func runRaw(
        executable: String = "/bin/sh", arguments: [String] = [], shell: String? = nil,
        environment: [String: String?]
    ) throws -> CLIResult {
        var merged = ProcessInfo.processInfo.environment
        merged.removeValue(forKey: "TPM_KEYCHAIN_TCTI")
        for (name, value) in environment { merged[name] = value }
        merged["TPM_KEYCHAIN_CLI"] = Self.executable
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = shell.map { ["-c", $0] } ?? arguments
        process.environment = merged
        let output = try makeScratchDirectory("raw-output")
        defer { try? FileManager.default.removeItem(atPath: output) }
        #expect(FileManager.default.createFile(atPath: output + "/stdout", contents: nil))
        #expect(FileManager.default.createFile(atPath: output + "/stderr", contents: nil))
        process.standardOutput = FileHandle(forWritingAtPath: output + "/stdout")
        process.standardError = FileHandle(forWritingAtPath: output + "/stderr")
        process.standardInput = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        return CLIResult(
            arguments: process.arguments ?? [], status: process.terminationStatus,
            killedBySignal: process.terminationReason == .uncaughtSignal,
            stdout: try String(contentsOfFile: output + "/stdout", encoding: .utf8),
            stderr: try String(contentsOfFile: output + "/stderr", encoding: .utf8))
    }
}

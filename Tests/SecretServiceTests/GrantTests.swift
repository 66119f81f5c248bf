import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Grants (`tpm-keychain grants`) over the Secret Service, with Debian's secret-tool as the
/// program: remembered across a daemon restart, bound to the file's path and hash or to its hash
/// alone, covering the keychain or one item, for a time or one use, and denies that win.
@Suite("grants decide which programs the Secret Service serves", .serialized)
struct GrantTests {
    /// secret-tool's file, its links resolved: what /proc/PID/exe reads for it.
    static let secretTool: String = {
        guard let real = realpath("/usr/bin/secret-tool", nil) else { return "/usr/bin/secret-tool" }
        defer { free(real) }
        return String(cString: real)
    }()

    /// A fixture whose collection "Granted" allows no program of the user's by its rules, with
    /// two items the CLI stored (the tools are not the Secret Service's callers); its store.
    static func grantedCollection(_ fixture: SecretServiceFixture) throws -> String {
        _ = try fixture.createCollection(
            label: "Granted", properties: "'org.tpmkeychain.Collection.AllowedExecutables': ('as', ['/nonexistent'])")
        let names = try FileManager.default.contentsOfDirectory(atPath: fixture.dataDirectory)
        let store = try #require(names.first { $0.hasPrefix("granted") }.map { fixture.dataDirectory + "/" + $0 })
        for (account, value) in [("me", "first value"), ("other", "second value")] {
            let added = try cli(
                fixture, ["add-generic-password", "--keychain", store, "-s", "granted", "-a", account, "-w", value])
            #expect(added.status == 0, "\(added)")
        }
        return store
    }

    static func cli(_ fixture: SecretServiceFixture, _ arguments: [String]) throws -> ClientRun {
        try fixture.run(SecretServiceFixture.tool, arguments)
    }

    /// `grants add … --keychain store`: the new grant's ID.
    static func grant(_ fixture: SecretServiceFixture, _ store: String, _ arguments: [String]) throws -> String {
        let added = try cli(fixture, ["grants", "add", "--keychain", store] + arguments)
        #expect(added.status == 0, "\(added)")
        return added.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    static func lookup(
        _ fixture: SecretServiceFixture, _ tool: String = secretTool, account: String = "me"
    ) throws
        -> ClientRun
    {
        try fixture.run(tool, ["lookup", "service", "granted", "account", account])
    }

    @Test(
        "a grant by path and hash lets secret-tool read, and still after a daemon restart; a byte-identical copy and a changed copy are refused; a grant by hash admits the copy, not the changed one; a deny wins until revoked"
    )
    func rememberedByPathAndHash() throws {
        let fixture = try SecretServiceFixture()
        defer { fixture.stop() }
        let store = try Self.grantedCollection(fixture)
        #expect(try Self.lookup(fixture).stdout == "", "the rules name no program")

        let byProgram = try Self.grant(fixture, store, ["--allow", "--program", Self.secretTool])
        #expect(try Self.lookup(fixture).stdout == "first value")
        // Remembered in the store: a new daemon, a new secret-tool process, the same answer.
        fixture.stopDaemon()
        let audit = fixture.directory + "/audit.log"
        _ = try fixture.startDaemon(extraArguments: ["--audit-log", audit])
        #expect(try Self.lookup(fixture).stdout == "first value")

        let copies = fixture.directory + "/copies"
        try FileManager.default.createDirectory(atPath: copies, withIntermediateDirectories: true)
        let copy = copies + "/secret-tool"
        let changed = copies + "/secret-tool-changed"
        try FileManager.default.copyItem(atPath: Self.secretTool, toPath: copy)
        var bytes = try Data(contentsOf: URL(fileURLWithPath: Self.secretTool))
        bytes.append(0) // past the end of the ELF image: it still runs, as another file
        try bytes.write(to: URL(fileURLWithPath: changed))
        chmod(changed, 0o755)
        #expect(try Self.lookup(fixture, copy).stdout == "", "the grant names the file at its path")
        #expect(try Self.lookup(fixture, changed).stdout == "")

        _ = try Self.grant(fixture, store, ["--allow", "--sha256-of", Self.secretTool])
        #expect(try Self.lookup(fixture, copy).stdout == "first value", "the same bytes, wherever they lie")
        #expect(try Self.lookup(fixture, changed).stdout == "", "other bytes are another program")

        let deny = try Self.grant(fixture, store, ["--deny", "--executable", copy])
        #expect(try Self.lookup(fixture, copy).stdout == "")
        #expect(try Self.lookup(fixture).stdout == "first value")
        let listed = try Self.cli(fixture, ["grants", "list", "--keychain", store])
        #expect(listed.stdout.split(separator: "\n").count == 3, "\(listed)")
        #expect(listed.stdout.contains("\(deny)  deny  executable \"\(copy)\""), "\(listed)")
        #expect(listed.stdout.contains("\(byProgram)  allow  executable \"\(Self.secretTool)\", sha256 "), "\(listed)")
        #expect(try Self.cli(fixture, ["grants", "revoke", "--keychain", store, deny]).status == 0)
        #expect(try Self.lookup(fixture, copy).stdout == "first value")

        // The audit names the grant that allowed, and the chain that led to the program.
        let chained = try fixture.run(
            "/bin/bash",
            [
                "-c",
                "\(SecretServiceFixture.python) -c 'import subprocess; subprocess.run([\"\(Self.secretTool)\", \"lookup\", \"service\", \"granted\", \"account\", \"me\"])'",
            ])
        #expect(chained.stdout == "first value", "\(chained)")
        let log = (try? String(contentsOfFile: audit, encoding: .utf8)) ?? ""
        #expect(log.contains("allowed by grant \(byProgram)"), "\(log)")
        #expect(log.contains("→ python3.11 → secret-tool") || log.contains("→ python3 → secret-tool"), "\(log)")
        #expect(log.contains("bash"), "\(log)")
    }

    @Test(
        "an item's grant covers that item only; a grant for one use is used up by its read; a grant for a time ends at it"
    )
    func scopesAndLeases() throws {
        let fixture = try SecretServiceFixture()
        defer { fixture.stop() }
        let store = try Self.grantedCollection(fixture)
        _ = try Self.grant(
            fixture, store, ["--allow", "--program", Self.secretTool, "--service", "granted", "--account", "me"])
        #expect(try Self.lookup(fixture).stdout == "first value")
        #expect(try Self.lookup(fixture, account: "other").stdout == "", "another item of the collection")

        let once = try Self.cli(
            fixture,
            [
                "grants", "add", "--keychain", store, "--allow", "--program", Self.secretTool, "--service", "granted",
                "--account", "other", "--once",
            ])
        #expect(once.status == 0, "\(once)")
        #expect(try Self.lookup(fixture, account: "other").stdout == "second value")
        #expect(try Self.lookup(fixture, account: "other").stdout == "", "used up")
        let left = try Self.cli(fixture, ["grants", "list", "--keychain", store])
        #expect(left.stdout.split(separator: "\n").count == 1, "\(left)")

        // A grant for an hour reads until the leases' clock (the debug builds' test clock, which
        // the CLI and the daemon both read) has passed its end, and not after.
        _ = try Self.grant(
            fixture, store,
            [
                "--allow", "--program", Self.secretTool, "--service", "granted", "--account", "other",
                "--for-seconds", "3600",
            ])
        #expect(try Self.lookup(fixture, account: "other").stdout == "second value")
        try "3500".write(toFile: fixture.testClockFile, atomically: true, encoding: .utf8)
        #expect(try Self.lookup(fixture, account: "other").stdout == "second value", "100 s left")
        try "3601".write(toFile: fixture.testClockFile, atomically: true, encoding: .utf8)
        #expect(try Self.lookup(fixture, account: "other").stdout == "", "the lease has ended")
    }

    @Test(
        "a person who answers remember is not asked again by that program, after a daemon restart too; a changed copy is asked; revoked, it is asked again"
    )
    func rememberedAnswer() throws {
        let fixture = try SecretServiceFixture(startDaemon: false)
        defer { fixture.stop() }
        let asked = fixture.directory + "/asked"
        let answer = fixture.directory + "/answer"
        // Exit 0 (yes) while the answer file exists, printing what it holds.
        let confirm = "echo \"$TPM_KEYCHAIN_PROMPT_REASON\" >> \(asked); cat \(answer)"
        try fixture.startDaemon(extraArguments: ["--confirm-command", confirm])
        let path = try fixture.createCollection(
            label: "Ask me", properties: "'org.tpmkeychain.Collection.ConfirmEachAccess': ('b', True)")
        let stored = try fixture.secretTool(
            ["store", "--label", "asked", "--collection", path, "service", "granted", "account", "me"],
            stdin: "first value")
        #expect(stored.status == 0, "\(stored)")
        func questions() -> Int {
            ((try? String(contentsOfFile: asked, encoding: .utf8)) ?? "").split(separator: "\n").count
        }
        try "remember\n".write(toFile: answer, atomically: true, encoding: .utf8)
        // The client says why it asks: the question shows it, and the grant keeps it.
        let why = try fixture.run(
            Self.secretTool,
            ["lookup", "service", "granted", "account", "me", "tpm-keychain:purpose", "push to origin"])
        #expect(why.stdout == "first value", "\(why)")
        #expect(questions() == 1)
        let question = (try? String(contentsOfFile: asked, encoding: .utf8)) ?? ""
        #expect(
            question.contains("secret-tool")
                && question.contains("to read \"asked\" of the keyring \"Ask me\" for \"push to origin\"?"),
            "\(question)")
        try FileManager.default.removeItem(atPath: answer) // from now on, every question is a no
        #expect(try Self.lookup(fixture).stdout == "first value", "remembered")
        fixture.stopDaemon()
        try fixture.startDaemon(extraArguments: ["--confirm-command", confirm])
        #expect(try Self.lookup(fixture).stdout == "first value", "remembered across a restart")
        #expect(questions() == 1, "nobody was asked again")

        let names = try FileManager.default.contentsOfDirectory(atPath: fixture.dataDirectory)
        let store = try #require(names.first { $0.hasPrefix("ask_me") }.map { fixture.dataDirectory + "/" + $0 })
        let listed = try Self.cli(fixture, ["grants", "list", "--keychain", store])
        let lines = listed.stdout.split(separator: "\n")
        #expect(lines.count == 1, "\(listed)")
        #expect(
            lines.first?.contains("allow  executable \"\(Self.secretTool)\", sha256 ") == true
                && lines.first?.hasSuffix("the whole keychain  until revoked  for \"push to origin\"") == true,
            "\(listed)")

        let changed = fixture.directory + "/secret-tool-changed"
        var bytes = try Data(contentsOf: URL(fileURLWithPath: Self.secretTool))
        bytes.append(0)
        try bytes.write(to: URL(fileURLWithPath: changed))
        chmod(changed, 0o755)
        #expect(try Self.lookup(fixture, changed).stdout == "", "another file is asked, and refused")
        #expect(questions() == 2)

        let id = try #require(lines.first.map { String($0.prefix(32)) })
        #expect(try Self.cli(fixture, ["grants", "revoke", "--keychain", store, id]).status == 0)
        #expect(try Self.lookup(fixture).stdout == "", "asked again, and refused")
        #expect(questions() == 3)
    }

    @Test(
        "a collection that keeps an audit trail records each read and refusal with the program and its chain, never a secret; an edited or cut log is reported"
    )
    func auditTrail() throws {
        let fixture = try SecretServiceFixture()
        defer { fixture.stop() }
        let store = try Self.grantedCollection(fixture)
        let enabled = try Self.cli(fixture, ["audit", "enable", "--keychain", store])
        #expect(enabled.status == 0, "\(enabled)")
        #expect(try Self.lookup(fixture).stdout == "", "refused by the rules")
        let id = try Self.grant(fixture, store, ["--allow", "--program", Self.secretTool])
        let chained = try fixture.run(
            "/bin/bash",
            ["-c", "\(Self.secretTool) lookup service granted account me; echo"])
        #expect(chained.stdout == "first value\n", "\(chained)")

        let shown = try Self.cli(fixture, ["audit", "show", "--keychain", store])
        #expect(shown.status == 0, "\(shown)")
        let lines = shown.stdout.split(separator: "\n").map(String.init)
        #expect(lines.last == "intact: \(lines.count - 1) records", "\(shown)")
        #expect(
            lines.contains {
                $0.contains("secretService read-secret refused (not among the allowed programs)")
                    && $0.contains("exe=\"\(Self.secretTool)\"")
            }, "\(shown)")
        #expect(
            lines.contains {
                $0.contains("secretService read-secret allowed by grant \(id)") && $0.contains("sha256=")
                    && $0.contains("chain=\"") && $0.contains("bash → secret-tool\"")
                    && $0.contains("collection=\"Granted\"")
            }, "\(shown)")
        let log = try String(contentsOfFile: store + "/audit.log", encoding: .utf8)
        #expect(!log.contains("first value") && !log.contains("second value"), "no secret in the trail")

        // Someone removes the refusal from the record: the trail says where it stops being true.
        let kept = log.split(separator: "\n").filter { !$0.contains("refused") }
        try (kept.map { $0 + "\n" }.joined()).write(toFile: store + "/audit.log", atomically: false, encoding: .utf8)
        let edited = try Self.cli(fixture, ["audit", "show", "--keychain", store])
        #expect(edited.status != 0 && edited.stderr.contains("cannot be trusted after record 0"), "\(edited)")
        // Or cuts its last record.
        let cut = log.split(separator: "\n").dropLast()
        try (cut.map { $0 + "\n" }.joined()).write(toFile: store + "/audit.log", atomically: false, encoding: .utf8)
        let shortened = try Self.cli(fixture, ["audit", "show", "--keychain", store])
        #expect(shortened.status != 0 && shortened.stderr.contains("cut from its end"), "\(shortened)")
    }

    @Test(
        "what a grant cannot stop: where Yama does not forbid it, a program no grant names reads the secret out of an allowed client's memory"
    )
    func ptraceReadsAnAllowedClient() throws {
        let fixture = try SecretServiceFixture()
        defer { fixture.stop() }
        let store = try Self.grantedCollection(fixture)
        let python = URL(fileURLWithPath: SecretServiceFixture.python).resolvingSymlinksInPath().path
        _ = try Self.grant(fixture, store, ["--allow", "--program", python])
        #expect(try Self.lookup(fixture).stdout == "", "secret-tool is not granted")

        // The allowed client: reads the secret, says so, and keeps it while it runs.
        let output = fixture.directory + "/client.out"
        _ = FileManager.default.createFile(atPath: output, contents: nil)
        let client = Process()
        client.executableURL = URL(fileURLWithPath: SecretServiceFixture.python)
        client.arguments = [
            "-c",
            """
            import secretstorage, sys, time
            connection = secretstorage.dbus_init()
            item = next(secretstorage.search_items(connection, {'service': 'granted', 'account': 'me'}))
            held = item.get_secret()
            print('read' if held == b'first value' else 'refused', flush=True)
            time.sleep(120)
            """,
        ]
        client.environment = fixture.environment
        client.standardOutput = FileHandle(forWritingAtPath: output)
        client.standardError = FileHandle(forWritingAtPath: output)
        try client.run()
        defer {
            kill(client.processIdentifier, SIGKILL)
            client.waitUntilExit()
        }
        let deadline = ContinuousClock.now + .seconds(120)
        while client.isRunning, ContinuousClock.now < deadline,
            !((try? String(contentsOfFile: output, encoding: .utf8)) ?? "").contains("read")
        {
            usleep(20_000)
        }
        #expect((try? String(contentsOfFile: output, encoding: .utf8)) == "read\n", "the granted client read it")

        // Another program of the same user, named by no grant, reads the client's memory.
        let reader = """
            my ($pid, $wanted) = @ARGV;
            open(my $maps, '<', "/proc/$pid/maps") or die "maps: $!";
            open(my $mem, '<:raw', "/proc/$pid/mem") or die "mem: $!";
            while (my $line = <$maps>) {
                my ($start, $end, $perms) = $line =~ /^([0-9a-f]+)-([0-9a-f]+) (\\S+)/ or next;
                next unless $perms =~ /^rw/;
                my ($from, $to) = (hex($start), hex($end));
                next if $to - $from > 256 * 1024 * 1024;
                seek($mem, $from, 0) or next;
                my $bytes;
                defined(read($mem, $bytes, $to - $from)) or next;
                if (index($bytes, $wanted) >= 0) { print "found\n"; exit 0; }
            }
            print "not found\n";
            """
        let read = try fixture.run("/usr/bin/perl", ["-e", reader, String(client.processIdentifier), "first value"])
        let scope = (try? String(contentsOfFile: "/proc/sys/kernel/yama/ptrace_scope", encoding: .utf8))?
            .trimmingCharacters(in: .whitespacesAndNewlines)
        if scope == nil || scope == "0" {
            #expect(read.stdout == "found\n", "Yama off or at 0: \(read)")
        } else {
            #expect(read.stdout != "found\n", "Yama at \(scope ?? "?"): \(read)")
        }
    }

    @Test("a grant by Flatpak app ID lets that app's sandbox read, and nothing else that the rules do not name")
    func grantByApplicationID() throws {
        let fixture = try SecretServiceFixture()
        defer { fixture.stop() }
        let store = try Self.grantedCollection(fixture)
        _ = try Self.grant(fixture, store, ["--allow", "--app-id", "org.example.App", "--purpose", "sync"])
        let read = """
            import secretstorage
            connection = secretstorage.dbus_init()
            item = next(secretstorage.search_items(connection, {'service': 'granted', 'account': 'me'}))
            try:
                print(item.get_secret().decode())
            except Exception as error:
                print(type(error).__name__)
            """
        let inSandbox = try SecretPortalTests.sandboxed(
            fixture, as: "org.example.App", ["/usr/bin/python3", "-c", read])
        #expect(inSandbox.stdout == "first value\n", "\(inSandbox)")
        let otherApp = try SecretPortalTests.sandboxed(
            fixture, as: "org.example.Other", ["/usr/bin/python3", "-c", read])
        #expect(otherApp.stdout != "first value\n", "\(otherApp)")
        let host = try fixture.run(SecretServiceFixture.python, ["-c", read])
        #expect(host.stdout != "first value\n", "\(host)")
    }
}

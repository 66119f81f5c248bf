import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The `security`-style verbs, run as a user would run them, against a private swtpm.
@Suite("generic password verbs")
struct GenericPasswordTests {
    @Test("add then find -w returns the password, newline-terminated")
    func addThenFind() throws {
        let fixture = try CLIFixture()
        let added = try fixture.succeed(
            "add-generic-password", "-s", "com.example.mail", "-a", "alice", "-w", "hunter2 with spaces")
        #expect(added.stdout.isEmpty)
        let found = try fixture.succeed("find-generic-password", "-s", "com.example.mail", "-a", "alice", "-w")
        #expect(found.stdout == "hunter2 with spaces\n")
        // -a is optional: the service's only account is found.
        let anyAccount = try fixture.succeed("find-generic-password", "-s", "com.example.mail", "-w")
        #expect(anyAccount.stdout == "hunter2 with spaces\n")
    }

    @Test("a password from a pipe is stored without its one trailing newline")
    func passwordFromPipe() throws {
        let fixture = try CLIFixture()
        try fixture.succeed("add-generic-password", "-s", "svc", "-a", "piped", stdin: Data("from stdin\n".utf8))
        #expect(try fixture.succeed("find-generic-password", "-s", "svc", "-a", "piped", "-w").stdout == "from stdin\n")
        // Only one newline is dropped; a password may itself end in one.
        try fixture.succeed("add-generic-password", "-s", "svc", "-a", "two-newlines", stdin: Data("line\n\n".utf8))
        #expect(
            try fixture.succeed("find-generic-password", "-s", "svc", "-a", "two-newlines", "-w").stdout == "line\n\n")
    }

    @Test("a password read from stdin never appears in the process's argv")
    func stdinPasswordNotInArgv() throws {
        let fixture = try CLIFixture()
        let secret = "argv-must-not-show-\(UUID().uuidString)"
        let running = try CLI.start(
            ["add-generic-password", "--keychain", fixture.store, "-s", "svc", "-a", "quiet"],
            environment: fixture.environment, stdinPipe: true)
        // The process waits for stdin: look at what every user of the machine can see, once it has
        // exec'd (until then /proc shows nothing, or the test runner's own command line).
        var commandLine = Data()
        let deadline = ContinuousClock.now + .seconds(10)
        while !commandLine.contains("add-generic-password") && ContinuousClock.now < deadline {
            commandLine =
                (try? Data(contentsOf: URL(fileURLWithPath: "/proc/\(running.processIdentifier)/cmdline"))) ?? Data()
            usleep(1_000)
        }
        try running.write(Data(secret.utf8), closing: true)
        let result = try running.finish()
        #expect(result.status == 0, "\(result)")
        #expect(commandLine.contains("add-generic-password"), "read the cmdline of another process")
        #expect(!commandLine.contains(secret))
        #expect(!result.stdout.contains(secret) && !result.stderr.contains(secret))
        #expect(try fixture.succeed("find-generic-password", "-s", "svc", "-a", "quiet", "-w").stdout == secret + "\n")
    }

    @Test("on a terminal, add prompts and reads the password with echo off")
    func terminalPrompt() throws {
        let fixture = try CLIFixture()
        let secret = "typed-at-a-terminal-\(UUID().uuidString.prefix(8))"
        // script(1) gives the CLI a pseudo-terminal; everything the terminal shows comes back on its stdout.
        let command = [CLI.executable, "add-generic-password", "--keychain", fixture.store, "-s", "svc", "-a", "tty"]
            .map { "'" + $0 + "'" }.joined(separator: " ")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["script", "-qec", command, "/dev/null"]
        var environment = ProcessInfo.processInfo.environment
        for case (let name, let value?) in fixture.environment { environment[name] = value }
        process.environment = environment
        let (input, output) = (Pipe(), Pipe())
        process.standardInput = input
        process.standardOutput = output
        try process.run()
        // Blocking reads below: if the CLI never finishes, end script(1), which hangs up its terminal.
        let watchdog = DispatchWorkItem {
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        }
        DispatchQueue.global().asyncAfter(deadline: .now() + 20, execute: watchdog)
        defer { watchdog.cancel() }
        // Type only once the prompt is up: turning echo off discards type-ahead, as getpass(3) does.
        var screen = Data()
        while !screen.contains("password data for new item: ") {
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            screen.append(chunk)
        }
        input.fileHandleForWriting.write(Data((secret + "\n").utf8))
        screen.append(output.fileHandleForReading.readDataToEndOfFile())
        try input.fileHandleForWriting.close()
        process.waitUntilExit()
        let shown = String(decoding: screen, as: UTF8.self)
        #expect(process.terminationStatus == 0, "\(shown)")
        #expect(shown.contains("password data for new item: "), "\(shown)")
        #expect(!shown.contains(secret), "the password was echoed: \(shown)")
        #expect(try fixture.succeed("find-generic-password", "-s", "svc", "-a", "tty", "-w").stdout == secret + "\n")
    }

    @Test("a duplicate add exits 45 with security's message; -U updates and keeps the attributes")
    func duplicateAndUpdate() throws {
        let fixture = try CLIFixture()
        try fixture.succeed("add-generic-password", "-s", "svc", "-a", "bob", "-w", "first", "-l", "Bob's login")
        let duplicate = try fixture.run("add-generic-password", "-s", "svc", "-a", "bob", "-w", "second")
        #expect(duplicate.status == 45, "\(duplicate)")
        // -w is public to every local user while the command runs: said first, then security's message.
        #expect(
            duplicate.stderr.hasPrefix(
                "tpm-keychain: warning: a password given with -w can be read by every local user"), "\(duplicate)")
        #expect(duplicate.lastErrorLine == SecurityMessages.duplicateItem)
        #expect(try fixture.succeed("find-generic-password", "-s", "svc", "-a", "bob", "-w").stdout == "first\n")

        try fixture.succeed("add-generic-password", "-s", "svc", "-a", "bob", "-w", "second", "-U")
        #expect(try fixture.succeed("find-generic-password", "-s", "svc", "-a", "bob", "-w").stdout == "second\n")
        let attributes = try fixture.succeed("find-generic-password", "-s", "svc", "-a", "bob").stdout
        #expect(attributes.contains(#""labl"<blob>="Bob's login""#), "\(attributes)")
        // -U also creates.
        try fixture.succeed("add-generic-password", "-s", "svc", "-a", "carol", "-w", "new", "-U")
        #expect(try fixture.succeed("find-generic-password", "-s", "svc", "-a", "carol", "-w").stdout == "new\n")
    }

    @Test("a missing item exits 44 with exactly security's message, for find and delete")
    func notFound() throws {
        let fixture = try CLIFixture()
        // No store at all yet: its own error naming the path (66), and looking does not create one.
        let beforeStore = try fixture.run("find-generic-password", "-s", "svc", "-a", "nobody")
        #expect(beforeStore.status == 66, "\(beforeStore)")
        #expect(beforeStore.stderr == "tpm-keychain: No keychain store at \(fixture.store)\n")
        #expect(!FileManager.default.fileExists(atPath: fixture.store))

        try fixture.succeed("add-generic-password", "-s", "svc", "-a", "present", "-w", "x")
        for arguments in [
            ["find-generic-password", "-s", "svc", "-a", "nobody"],
            ["find-generic-password", "-s", "svc", "-a", "nobody", "-w"],
            ["find-generic-password", "-s", "other-service"],
            ["delete-generic-password", "-s", "svc", "-a", "nobody"],
        ] {
            let result = try CLI.run(
                [arguments[0], "--keychain", fixture.store] + arguments.dropFirst(), environment: fixture.environment)
            #expect(result.status == 44, "\(result)")
            #expect(result.stderr == SecurityMessages.itemNotFound + "\n", "\(result)")
            #expect(result.stdout.isEmpty, "\(result)")
        }
    }

    @Test(
        "the scripted lookup (-s -a -w, taken before ArgumentParser) and the full command give the same output and status"
    )
    func scriptedLookupMatchesFullCommand() throws {
        let fixture = try CLIFixture()
        try fixture.succeed("add-generic-password", "-s", "svc", "-a", "alice", "-w", "s3cret value")
        // The same item file, damaged afterwards, for the error path.
        try fixture.succeed("add-generic-password", "-s", "svc", "-a", "damaged", "-w", "x")
        // --passcode-fd is not part of the scripted shape: it sends the same lookup through
        // ArgumentParser's FindGenericPassword (a plain item never reads the descriptor).
        let viaParser = ["--passcode-fd", "0"]
        let shapes: [[String]] = [
            ["-s", "svc", "-a", "alice", "-w"],
            ["-w", "--account", "alice", "--service=svc"],
            ["-s", "svc", "-a", "nobody", "-w"],
            ["-s", "other", "-a", "alice", "-w"],
        ]
        func same(_ arguments: [String], store: String? = nil) throws {
            let keychain = ["--keychain", store ?? fixture.store]
            let scripted = try CLI.run(
                ["find-generic-password"] + keychain + arguments, environment: fixture.environment)
            let parsed = try CLI.run(
                ["find-generic-password"] + keychain + arguments + viaParser, environment: fixture.environment)
            #expect(scripted.status == parsed.status, "\(scripted)\n\(parsed)")
            #expect(scripted.stdout == parsed.stdout, "\(scripted)\n\(parsed)")
            #expect(scripted.stderr == parsed.stderr, "\(scripted)\n\(parsed)")
        }
        for shape in shapes { try same(shape) }
        #expect(
            try fixture.succeed("find-generic-password", "-s", "svc", "-a", "alice", "-w").stdout == "s3cret value\n")
        // No store at that path: 66, the same message both ways.
        try same(["-s", "svc", "-a", "alice", "-w"], store: fixture.directory + "/absent")

        // A damaged item: the same tamper report (65) both ways.
        let items = try FileManager.default.subpathsOfDirectory(atPath: fixture.store).filter { $0.hasSuffix(".item") }
        #expect(items.count == 2)
        var damagedOne = false
        for item in items {
            let path = fixture.store + "/" + item
            var bytes = try Data(contentsOf: URL(fileURLWithPath: path))
            bytes[bytes.count - 1] ^= 0x01
            // Damage only the item that is not alice's: her lookup must still work after this.
            try bytes.write(to: URL(fileURLWithPath: path))
            if try CLI.run(
                ["find-generic-password", "--keychain", fixture.store, "-s", "svc", "-a", "alice", "-w"],
                environment: fixture.environment
            ).status == 0 {
                damagedOne = true
                break
            }
            bytes[bytes.count - 1] ^= 0x01
            try bytes.write(to: URL(fileURLWithPath: path))
        }
        #expect(damagedOne)
        let damaged = try CLI.run(
            ["find-generic-password", "--keychain", fixture.store, "-s", "svc", "-a", "damaged", "-w"],
            environment: fixture.environment)
        #expect(damaged.status == 65, "\(damaged)")
        try same(["-s", "svc", "-a", "damaged", "-w"])
    }

    @Test("delete prints security's confirmation, and the item is gone")
    func delete() throws {
        let fixture = try CLIFixture()
        try fixture.succeed("add-generic-password", "-s", "svc", "-a", "doomed", "-w", "x")
        try fixture.succeed("add-generic-password", "-s", "svc", "-a", "kept", "-w", "y")
        #expect(
            try fixture.succeed("delete-generic-password", "-s", "svc", "-a", "doomed").stdout
                == "password has been deleted.\n")
        #expect(try fixture.run("find-generic-password", "-s", "svc", "-a", "doomed").status == 44)
        #expect(try fixture.run("delete-generic-password", "-s", "svc", "-a", "doomed").status == 44)
        #expect(try fixture.succeed("find-generic-password", "-s", "svc", "-a", "kept", "-w").stdout == "y\n")
    }

    @Test("find without -w prints security's attribute block: labels and comments, never the secret")
    func attributes() throws {
        let fixture = try CLIFixture()
        try fixture.succeed(
            "add-generic-password", "-s", "com.example.vpn", "-a", "dave", "-w", "s3cret-value",
            "-l", "VPN \"office\"", "-j", "rotated monthly")
        try fixture.succeed("add-generic-password", "-s", "com.example.vpn", "-a", "erin", "-w", "other")
        let output = try fixture.succeed("find-generic-password", "-s", "com.example.vpn", "-a", "dave").stdout
        let lines = output.split(separator: "\n").map(String.init)
        #expect(lines.first == "keychain: \"\(fixture.store)\"")
        #expect(lines.dropFirst().prefix(2) == ["class: \"genp\"", "attributes:"])
        #expect(lines.contains(#"    "acct"<blob>="dave""#))
        #expect(lines.contains(#"    "svce"<blob>="com.example.vpn""#))
        #expect(lines.contains(#"    "labl"<blob>="VPN \"office\"""#), "\(output)")
        #expect(lines.contains(#"    "icmt"<blob>="rotated monthly""#))
        let dates = lines.filter { $0.contains("<timedate>") }
        #expect(dates.count == 2)
        for line in dates {
            #expect(line.wholeMatch(of: #/    "(cdat|mdat)"<timedate>="20\d{12}Z"/#) != nil, "\(line)")
        }
        #expect(!output.contains("s3cret-value"))

        let bare = try fixture.succeed("find-generic-password", "-s", "com.example.vpn", "-a", "erin").stdout
        #expect(bare.contains(#""labl"<blob>=<NULL>"#) && bare.contains(#""icmt"<blob>=<NULL>"#), "\(bare)")
    }

    @Test("dump-keychain lists every item without secrets; -d adds them")
    func dump() throws {
        let fixture = try CLIFixture()
        try fixture.succeed("add-generic-password", "-s", "com.example.a", "-a", "first", "-w", "secret-one")
        try fixture.succeed(
            "add-generic-password", "-s", "com.example.b", "-a", "second", "-w", "secret-two", "-j", "note")
        try fixture.succeed(
            "add-generic-password", "-s", "com.example.b", "-a", "binary", stdin: Data([0xFF, 0x00, 0x41]))

        let listing = try fixture.succeed("dump-keychain").stdout
        #expect(listing.components(separatedBy: "class: \"genp\"").count == 4, "\(listing)")
        for account in ["first", "second", "binary"] { #expect(listing.contains("\"acct\"<blob>=\"\(account)\"")) }
        #expect(!listing.contains("secret-one") && !listing.contains("secret-two") && !listing.contains("data:"))

        let decrypted = try fixture.succeed("dump-keychain", "-d").stdout
        #expect(decrypted.contains("data:\n\"secret-one\"\n"), "\(decrypted)")
        #expect(decrypted.contains("data:\n\"secret-two\"\n"))
        #expect(decrypted.contains("data:\n0xFF0041\n"), "bytes that are not UTF-8 are shown as hex")
    }

    @Test("dump-keychain of a store that does not exist says so (66), prints nothing and creates nothing")
    func dumpWithoutStore() throws {
        let fixture = try CLIFixture()
        let result = try fixture.run("dump-keychain", "-d")
        #expect(result.status == 66, "\(result)")
        #expect(result.stdout.isEmpty)
        #expect(result.stderr == "tpm-keychain: No keychain store at \(fixture.store)\n")
        #expect(!FileManager.default.fileExists(atPath: fixture.store))
    }

    @Test("the store is 0700, item files 0600, and no file holds a service, account or password in clear")
    func filesOnDisk() throws {
        let fixture = try CLIFixture()
        let names = [
            "service": "com.example.cleartext-probe", "account": "account-probe-7f3a",
            "password": "password-probe-91c2",
        ]
        try fixture.succeed(
            "add-generic-password", "-s", names["service"]!, "-a", names["account"]!, "-w", names["password"]!,
            "-l", "label-probe", "-j", "comment-probe")
        try fixture.succeed(
            "add-generic-password", "-s", names["service"]!, "-a", "stdin-account", stdin: Data(names["password"]!.utf8)
        )

        #expect(permissions(fixture.store) == 0o700)
        let files = regularFiles(under: fixture.store)
        let items = files.filter { $0.hasSuffix(".item") }
        #expect(items.count == 2, "\(files)")
        for file in files {
            #expect(permissions(file) == 0o600, "\(file) is \(String(permissions(file), radix: 8))")
            let bytes = try Data(contentsOf: URL(fileURLWithPath: file))
            for (what, text) in names.merging(
                ["label": "label-probe", "comment": "comment-probe"], uniquingKeysWith: { $1 })
            {
                #expect(!bytes.contains(text), "\(file) holds the \(what) in clear")
            }
        }
    }

    @Test("usage errors exit 64")
    func usage() throws {
        let fixture = try CLIFixture()
        let missingService = try fixture.run("add-generic-password", "-a", "x", "-w", "y")
        #expect(missingService.status == 64, "\(missingService)")
        let emptyService = try fixture.run("add-generic-password", "-s", "", "-a", "x", "-w", "y")
        #expect(emptyService.status == 64, "\(emptyService)")
    }
}

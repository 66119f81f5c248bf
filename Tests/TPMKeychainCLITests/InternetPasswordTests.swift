import Foundation
import Testing

/// `add-`, `find-` and `delete-internet-password`, run as a user would run them, against a private swtpm.
@Suite("internet password verbs")
struct InternetPasswordTests {
    /// Every attribute flag of add-internet-password, with values that differ from the defaults.
    static let everyFlag = [
        "-a", "alice", "-s", "git.example.com", "-r", "htps", "-P", "8443", "-p", "/team/repo.git",
        "-t", "form", "-d", "Example Realm", "-l", "Example login", "-j", "rotated \"monthly\"",
        "-D", "Web form password",
    ]

    @Test(
        "add with every flag; find shows each attribute in security's block, never the password; -w prints only the password"
    )
    func addAndFindEveryFlag() throws {
        let fixture = try CLIFixture()
        let added = try fixture.succeed("add-internet-password", arguments: Self.everyFlag + ["-w", "s3cret-inet"])
        #expect(added.stdout.isEmpty)

        let found = try fixture.succeed("find-internet-password", "-s", "git.example.com")
        let lines = found.stdout.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let attributes = [
            #"    "acct"<blob>="alice""#,
            #"    "atyp"<blob>="form""#,
            #"    "desc"<blob>="Web form password""#,
            #"    "icmt"<blob>="rotated \"monthly\"""#,
            #"    "labl"<blob>="Example login""#,
            #"    "path"<blob>="/team/repo.git""#,
            // security's print_buffer: hex since a byte is not printable, then (two spaces) the
            // printable ones quoted, octal escapes for the rest. 8443 is 0x000020FB.
            #"    "port"<uint32>=0x000020FB  "\000\000 \373""#,
            #"    "ptcl"<uint32>="htps""#,
            #"    "sdmn"<blob>="Example Realm""#,
            #"    "srvr"<blob>="git.example.com""#,
        ]
        #expect(
            Array(lines.prefix(3)) == ["keychain: \"\(fixture.store)\"", "class: \"inet\"", "attributes:"], "\(found)")
        for line in attributes { #expect(lines.contains(line), "missing \(line) in\n\(found.stdout)") }
        let dates = lines.filter { $0.contains("<timedate>") }
        #expect(dates.count == 2)
        for line in dates {
            #expect(line.wholeMatch(of: #/    "(cdat|mdat)"<timedate>="20\d{12}Z"/#) != nil, "\(line)")
        }
        // The attributes in security's alphabetical order, and nothing else (no agrp: no access group).
        let codes = lines.dropFirst(3).filter { !$0.isEmpty }.map { String($0.dropFirst(5).prefix(4)) }
        #expect(
            codes == ["acct", "atyp", "cdat", "desc", "icmt", "labl", "mdat", "path", "port", "ptcl", "sdmn", "srvr"])
        #expect(!found.stdout.contains("s3cret-inet") && !found.stderr.contains("s3cret-inet"))

        let password = try fixture.succeed("find-internet-password", "-s", "git.example.com", "-w")
        #expect(password.stdout == "s3cret-inet\n")
        #expect(password.stderr.isEmpty, "\(password)")
    }

    @Test("each matching flag matches on its own; a wrong value for any of them is 44")
    func everyMatchingFlag() throws {
        let fixture = try CLIFixture()
        try fixture.succeed("add-internet-password", arguments: Self.everyFlag + ["-w", "matched"])
        let matching: [(flag: String, right: String, wrong: String)] = [
            ("-a", "alice", "bob"), ("-s", "git.example.com", "example.com"), ("-r", "htps", "http"),
            ("-P", "8443", "443"),
            ("-p", "/team/repo.git", "/team"), ("-t", "form", "dflt"), ("-d", "Example Realm", "Other Realm"),
        ]
        for (flag, right, wrong) in matching {
            #expect(
                try fixture.succeed("find-internet-password", flag, right, "-w").stdout == "matched\n",
                "\(flag) \(right)")
            let miss = try fixture.run("find-internet-password", flag, wrong, "-w")
            #expect(miss.status == 44, "\(flag) \(wrong): \(miss)")
            #expect(miss.stdout.isEmpty)
        }
        // All of them at once.
        let all = Array(Self.everyFlag[0..<14])
        #expect(try fixture.succeed("find-internet-password", arguments: all + ["-w"]).stdout == "matched\n")
        // With no flag at all, any internet password matches.
        #expect(try fixture.succeed("find-internet-password", "-w").stdout == "matched\n")
    }

    @Test("defaults: authentication type dflt, port 0, no protocol; an unspecified port matches any")
    func defaults() throws {
        let fixture = try CLIFixture()
        try fixture.succeed("add-internet-password", "-a", "carol", "-s", "ftp.example.com", "-w", "plain")
        let block = try fixture.succeed("find-internet-password", "-s", "ftp.example.com").stdout
        #expect(block.contains(#""atyp"<blob>="dflt""#), "\(block)")
        #expect(block.contains(#""port"<uint32>=0x00000000 "#), "\(block)")
        #expect(block.contains(#""ptcl"<uint32>=<NULL>"#) && block.contains(#""path"<blob>=<NULL>"#), "\(block)")
        #expect(
            try fixture.succeed("find-internet-password", "-s", "ftp.example.com", "-t", "dflt", "-w").stdout
                == "plain\n")
        // -P 0 is "no port", which security treats as "any port" when matching.
        try fixture.succeed(
            "add-internet-password", "-a", "carol", "-s", "web.example.com", "-P", "443", "-r", "htps", "-w", "tls")
        #expect(
            try fixture.succeed("find-internet-password", "-s", "web.example.com", "-P", "0", "-w").stdout == "tls\n")
        #expect(try fixture.succeed("find-internet-password", "-s", "web.example.com", "-w").stdout == "tls\n")
    }

    @Test(
        "a duplicate add exits 45 with security's message; -U updates and keeps the attributes; another port is another item"
    )
    func duplicateAndUpdate() throws {
        let fixture = try CLIFixture()
        let identity = ["-a", "dave", "-s", "mail.example.com", "-r", "imps", "-P", "993"]
        try fixture.succeed(
            "add-internet-password", arguments: identity + ["-w", "first", "-l", "Mail", "-j", "kept comment"])
        let duplicate = try fixture.run("add-internet-password", arguments: identity + ["-w", "second"])
        #expect(duplicate.status == 45, "\(duplicate)")
        #expect(
            duplicate.stderr.hasPrefix(
                "tpm-keychain: warning: a password given with -w can be read by every local user"), "\(duplicate)")
        #expect(duplicate.lastErrorLine == SecurityMessages.duplicateItem)
        #expect(try fixture.succeed("find-internet-password", arguments: identity + ["-w"]).stdout == "first\n")

        try fixture.succeed("add-internet-password", arguments: identity + ["-w", "second", "-U"])
        #expect(try fixture.succeed("find-internet-password", arguments: identity + ["-w"]).stdout == "second\n")
        let block = try fixture.succeed("find-internet-password", arguments: identity).stdout
        #expect(block.contains(#""labl"<blob>="Mail""#) && block.contains(#""icmt"<blob>="kept comment""#), "\(block)")

        // The port is part of the item's name, as on macOS: the same account on port 143 is new.
        try fixture.succeed(
            "add-internet-password", "-a", "dave", "-s", "mail.example.com", "-r", "imap", "-P", "143", "-w",
            "plain-imap")
        #expect(
            try fixture.succeed("find-internet-password", "-s", "mail.example.com", "-P", "143", "-w").stdout
                == "plain-imap\n")
        #expect(
            try fixture.succeed("find-internet-password", "-s", "mail.example.com", "-P", "993", "-w").stdout
                == "second\n")
        // -U also creates.
        try fixture.succeed("add-internet-password", "-a", "erin", "-s", "mail.example.com", "-w", "created", "-U")
        #expect(try fixture.succeed("find-internet-password", "-a", "erin", "-w").stdout == "created\n")
    }

    @Test("the password from standard input, with add-generic-password's refusals")
    func passwordFromStdin() throws {
        let fixture = try CLIFixture()
        let piped = try fixture.succeed(
            "add-internet-password", "-a", "frank", "-s", "piped.example.com", stdin: Data("from stdin\n".utf8))
        #expect(!piped.stderr.contains("warning"), "\(piped)")
        #expect(try fixture.succeed("find-internet-password", "-s", "piped.example.com", "-w").stdout == "from stdin\n")

        let empty = try fixture.run("add-internet-password", "-a", "frank", "-s", "empty.example.com", stdin: Data())
        #expect(empty.status == 64, "\(empty)")
        #expect(empty.stderr.contains("the password read from standard input is empty; nothing was stored"))
        #expect(try fixture.run("find-internet-password", "-s", "empty.example.com").status == 44)
        try fixture.succeed(
            "add-internet-password", "-a", "frank", "-s", "empty.example.com", "--allow-empty", stdin: Data())
        #expect(try fixture.succeed("find-internet-password", "-s", "empty.example.com", "-w").stdout == "\n")
    }

    @Test("a missing item exits 44 with exactly security's message, for find, find -w, find -g and delete")
    func notFound() throws {
        let fixture = try CLIFixture()
        try fixture.succeed("add-internet-password", "-a", "gina", "-s", "present.example.com", "-w", "x")
        for arguments in [
            ["find-internet-password", "-s", "absent.example.com"],
            ["find-internet-password", "-s", "present.example.com", "-a", "nobody", "-w"],
            ["find-internet-password", "-s", "present.example.com", "-r", "htps", "-g"],
            ["delete-internet-password", "-s", "absent.example.com"],
        ] {
            let result = try CLI.run(
                [arguments[0], "--keychain", fixture.store] + arguments.dropFirst(), environment: fixture.environment)
            #expect(result.status == 44, "\(result)")
            #expect(result.stderr == SecurityMessages.itemNotFound + "\n", "\(result)")
            #expect(result.stdout.isEmpty, "\(result)")
        }
        // Generic passwords are another class: a service of that name is no server.
        try fixture.succeed("add-generic-password", "-s", "generic.example.com", "-a", "gina", "-w", "y")
        #expect(try fixture.run("find-internet-password", "-s", "generic.example.com").status == 44)
    }

    @Test("-g prints the attributes on stdout and security's password line on stderr")
    func showPassword() throws {
        let fixture = try CLIFixture()
        try fixture.succeed("add-internet-password", "-a", "hank", "-s", "g.example.com", "-w", "say \"hi\"")
        let result = try fixture.succeed("find-internet-password", "-s", "g.example.com", "-g")
        #expect(result.stdout.contains(#""srvr"<blob>="g.example.com""#), "\(result)")
        #expect(!result.stdout.contains("say"), "the password went to stdout: \(result)")
        #expect(result.stderr == #"password: "say \"hi\"""# + "\n", "\(result)")
        // -w wins over -g, as in security: the bare password on stdout, nothing on stderr.
        let both = try fixture.succeed("find-internet-password", "-s", "g.example.com", "-g", "-w")
        #expect(both.stdout == "say \"hi\"\n" && both.stderr.isEmpty, "\(both)")
        // A password that is not UTF-8 is shown in hex.
        try fixture.succeed(
            "add-internet-password", "-a", "hank", "-s", "bytes.example.com", stdin: Data([0xFF, 0x00, 0x41]))
        #expect(
            try fixture.succeed("find-internet-password", "-s", "bytes.example.com", "-g").stderr
                == "password: 0xFF0041\n")
    }

    @Test("delete removes the first match in creation order, prints its attributes and security's confirmation")
    func deleteFirstMatch() throws {
        let fixture = try CLIFixture()
        try fixture.succeed("add-internet-password", "-a", "first", "-s", "shared.example.com", "-w", "one")
        try fixture.succeed("add-internet-password", "-a", "second", "-s", "shared.example.com", "-w", "two")
        try fixture.succeed("add-internet-password", "-a", "other", "-s", "other.example.com", "-w", "three")

        let deleted = try fixture.succeed("delete-internet-password", "-s", "shared.example.com")
        #expect(
            deleted.stdout.hasPrefix("keychain: \"\(fixture.store)\"\nclass: \"inet\"\nattributes:\n"), "\(deleted)")
        #expect(deleted.stdout.contains(#""acct"<blob>="first""#))
        #expect(deleted.stdout.hasSuffix("password has been deleted.\n"))
        #expect(!deleted.stdout.contains("one\n"))
        #expect(try fixture.run("find-internet-password", "-a", "first").status == 44)
        #expect(try fixture.succeed("find-internet-password", "-s", "shared.example.com", "-w").stdout == "two\n")
        #expect(try fixture.succeed("find-internet-password", "-s", "other.example.com", "-w").stdout == "three\n")

        #expect(
            try fixture.succeed("delete-internet-password", "-s", "shared.example.com", "-a", "second").stdout.contains(
                #""acct"<blob>="second""#))
        #expect(try fixture.run("delete-internet-password", "-s", "shared.example.com").status == 44)
        #expect(try fixture.succeed("find-internet-password", "-s", "other.example.com", "-w").stdout == "three\n")
    }

    @Test("usage errors exit 64: missing -s or -a, a code that is not four characters, a delete that names nothing")
    func usage() throws {
        let fixture = try CLIFixture()
        for arguments in [
            ["add-internet-password", "-a", "x", "-w", "y"],
            ["add-internet-password", "-s", "example.com", "-w", "y"],
            ["add-internet-password", "-s", "", "-a", "x", "-w", "y"],
            ["add-internet-password", "-s", "example.com", "-a", "x", "-P", "70000", "-w", "y"],
            ["find-internet-password", "-t", "basic"],
            ["delete-internet-password"],
        ] {
            let result = try CLI.run(
                [arguments[0], "--keychain", fixture.store] + arguments.dropFirst(), environment: fixture.environment)
            #expect(result.status == 64, "\(result)")
        }
        let https = try fixture.run("add-internet-password", "-s", "example.com", "-a", "x", "-r", "https", "-w", "y")
        #expect(https.status == 64, "\(https)")
        #expect(https.lastErrorLine.contains(#"for https it is "htps""#), "\(https)")
        let ftp = try fixture.run("find-internet-password", "-r", "ftp")
        #expect(ftp.status == 64 && ftp.lastErrorLine.contains(#"for ftp it is "ftp ""#), "\(ftp)")
        let short = try fixture.run("find-internet-password", "-t", "ntl")
        #expect(short.status == 64 && short.lastErrorLine.contains(#"try "ntl ""#), "\(short)")
        // Nothing was stored by any of them (and the finds created no store).
        #expect(!FileManager.default.fileExists(atPath: fixture.store))
    }
}

extension CLIFixture {
    /// ``succeed(_:_:stdin:sourceLocation:)`` with the arguments as an array.
    @discardableResult
    func succeed(
        _ verb: String, arguments: [String], stdin: Data? = nil, sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> CLIResult {
        let result = try CLI.run([verb, "--keychain", store] + arguments, environment: environment, stdin: stdin)
        #expect(result.status == 0, "\(result)", sourceLocation: sourceLocation)
        return result
    }

    /// ``run(_:_:stdin:tcti:)`` with the arguments as an array.
    func run(_ verb: String, arguments: [String], stdin: Data? = nil) throws -> CLIResult {
        try CLI.run([verb, "--keychain", store] + arguments, environment: environment, stdin: stdin)
    }
}

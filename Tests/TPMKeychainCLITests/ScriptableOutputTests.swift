import Foundation
import Testing

/// `--json` (README, "Scriptable output") and the generic-password flags scripts use: `-g`, `-D`, `-G`.
@Suite("scriptable output")
struct ScriptableOutputTests {
    /// The object `--json` printed, parsed as a script would parse it.
    static func object(_ result: CLIResult, sourceLocation: SourceLocation = #_sourceLocation) throws -> [String: Any] {
        let parsed = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8))
        return try #require(parsed as? [String: Any], "not a JSON object: \(result)", sourceLocation: sourceLocation)
    }

    /// A date field: ISO 8601 in UTC, whole seconds, within the last few minutes.
    static func expectRecentDate(_ value: Any?, sourceLocation: SourceLocation = #_sourceLocation) {
        let text = value as? String ?? ""
        #expect(
            text.wholeMatch(of: #/20\d\d-\d\d-\d\dT\d\d:\d\d:\d\dZ/#) != nil, "\(String(describing: value))",
            sourceLocation: sourceLocation)
        let date = ISO8601DateFormatter().date(from: text)
        #expect(date.map { abs($0.timeIntervalSinceNow) < 600 } == true, "\(text)", sourceLocation: sourceLocation)
    }

    @Test("find-generic-password --json: every field, by its documented name; the password only with -w or -g")
    func genericJSON() throws {
        let fixture = try CLIFixture()
        try fixture.succeed(
            "add-generic-password", "-s", "com.example.api", "-a", "deploy", "-w", "json-secret-1",
            "-l", "API token", "-j", "for CI", "-D", "application password", "-G", "v2")
        let plain = try fixture.succeed("find-generic-password", "-s", "com.example.api", "-a", "deploy", "--json")
        let object = try Self.object(plain)
        #expect(object["class"] as? String == "genp")
        #expect(object["keychain"] as? String == fixture.store)
        #expect(object["service"] as? String == "com.example.api")
        #expect(object["account"] as? String == "deploy")
        #expect(object["label"] as? String == "API token")
        #expect(object["comment"] as? String == "for CI")
        #expect(object["description"] as? String == "application password")
        #expect(object["generic"] as? String == "v2")
        #expect(object["accessGroup"] is NSNull)
        Self.expectRecentDate(object["created"])
        Self.expectRecentDate(object["modified"])
        // Exactly the documented fields: none of the internet password's, and no password.
        #expect(
            Set(object.keys) == [
                "class", "keychain", "service", "account", "label", "comment", "description", "generic",
                "accessGroup", "created", "modified",
            ])
        #expect(!plain.stdout.contains("json-secret-1") && !plain.stderr.contains("json-secret-1"))

        for flag in ["-w", "-g"] {
            let asked = try fixture.succeed("find-generic-password", "-s", "com.example.api", "--json", flag)
            let withPassword = try Self.object(asked)
            #expect(withPassword["password"] as? String == "json-secret-1", "\(flag): \(asked)")
            #expect(withPassword["account"] as? String == "deploy")
            // The document carries it; nothing else prints it.
            #expect(asked.stderr.isEmpty, "\(flag): \(asked)")
        }
        // Absent attributes are null, not missing.
        try fixture.succeed("add-generic-password", "-s", "com.example.api", "-a", "bare", "-w", "x")
        let bare = try Self.object(
            try fixture.succeed("find-generic-password", "-s", "com.example.api", "-a", "bare", "--json"))
        for key in ["label", "comment", "description", "generic", "accessGroup"] {
            #expect(bare[key] is NSNull, "\(key)")
        }
    }

    @Test("find-internet-password --json: every field, port as a number; the password only with -w or -g")
    func internetJSON() throws {
        let fixture = try CLIFixture()
        try fixture.succeed(
            "add-internet-password", "-a", "alice", "-s", "git.example.com", "-r", "htps", "-P", "8443", "-p", "/repo",
            "-t", "dflt", "-d", "Realm", "-l", "Git", "-j", "note", "-D", "Internet password", "-w", "json-secret-2")
        let plain = try fixture.succeed("find-internet-password", "-s", "git.example.com", "--json")
        let object = try Self.object(plain)
        #expect(object["class"] as? String == "inet")
        #expect(object["keychain"] as? String == fixture.store)
        #expect(object["server"] as? String == "git.example.com")
        #expect(object["account"] as? String == "alice")
        #expect(object["protocol"] as? String == "htps")
        #expect((object["port"] as? NSNumber)?.intValue == 8443)
        #expect(object["path"] as? String == "/repo")
        #expect(object["authenticationType"] as? String == "dflt")
        #expect(object["securityDomain"] as? String == "Realm")
        #expect(object["label"] as? String == "Git")
        #expect(object["comment"] as? String == "note")
        #expect(object["description"] as? String == "Internet password")
        #expect(object["accessGroup"] is NSNull)
        Self.expectRecentDate(object["created"])
        Self.expectRecentDate(object["modified"])
        #expect(
            Set(object.keys) == [
                "class", "keychain", "server", "account", "protocol", "port", "path", "authenticationType",
                "securityDomain", "label", "comment", "description", "accessGroup", "created", "modified",
            ])
        #expect(!plain.stdout.contains("json-secret-2") && !plain.stderr.contains("json-secret-2"))

        for flag in ["-w", "-g"] {
            let asked = try fixture.succeed("find-internet-password", "-s", "git.example.com", "--json", flag)
            #expect(try Self.object(asked)["password"] as? String == "json-secret-2", "\(flag): \(asked)")
            #expect(asked.stderr.isEmpty, "\(flag): \(asked)")
        }
        // A password that is not UTF-8 comes as base64 under its own name.
        try fixture.succeed(
            "add-internet-password", "-a", "bytes", "-s", "bin.example.com", stdin: Data([0xFF, 0x00, 0x41]))
        let binary = try Self.object(
            try fixture.succeed("find-internet-password", "-s", "bin.example.com", "--json", "-w"))
        #expect(binary["password"] is NSNull)
        #expect(binary["passwordBase64"] as? String == Data([0xFF, 0x00, 0x41]).base64EncodedString())
        #expect((binary["port"] as? NSNumber)?.intValue == 0)
        #expect(binary["protocol"] is NSNull)
    }

    @Test("dump-keychain --json lists both classes in one array; passwords only with -d")
    func dumpJSON() throws {
        let fixture = try CLIFixture()
        try fixture.succeed("add-generic-password", "-s", "com.example.a", "-a", "gen", "-w", "dump-secret-genp")
        try fixture.succeed(
            "add-internet-password", "-s", "www.example.com", "-a", "web", "-r", "htps", "-w", "dump-secret-inet")
        let listing = try fixture.succeed("dump-keychain", "--json")
        let items = try #require(
            try JSONSerialization.jsonObject(with: Data(listing.stdout.utf8)) as? [[String: Any]], "\(listing)")
        #expect(items.count == 2)
        let generic = try #require(items.first { $0["class"] as? String == "genp" })
        let internet = try #require(items.first { $0["class"] as? String == "inet" })
        #expect(generic["service"] as? String == "com.example.a" && generic["account"] as? String == "gen")
        #expect(internet["server"] as? String == "www.example.com" && internet["account"] as? String == "web")
        #expect(internet["protocol"] as? String == "htps")
        for item in items { #expect(item["password"] == nil) }
        #expect(!listing.stdout.contains("dump-secret"))

        let decrypted = try fixture.succeed("dump-keychain", "--json", "-d")
        let withSecrets = try #require(
            try JSONSerialization.jsonObject(with: Data(decrypted.stdout.utf8)) as? [[String: Any]])
        let passwords = Set(withSecrets.compactMap { $0["password"] as? String })
        #expect(passwords == ["dump-secret-genp", "dump-secret-inet"])

        // The text listing shows both classes too.
        let text = try fixture.succeed("dump-keychain").stdout
        #expect(text.contains("class: \"genp\"") && text.contains("class: \"inet\""), "\(text)")
        #expect(text.contains(#""srvr"<blob>="www.example.com""#))
        // An empty store is an empty array.
        try fixture.succeed("delete-generic-password", "-s", "com.example.a", "-a", "gen")
        try fixture.succeed("delete-internet-password", "-s", "www.example.com")
        let empty = try fixture.succeed("dump-keychain", "--json")
        #expect(
            (try JSONSerialization.jsonObject(with: Data(empty.stdout.utf8)) as? [Any])?.isEmpty == true, "\(empty)")
    }

    @Test("find-generic-password -g: attributes on stdout, security's password line on stderr")
    func genericShowPassword() throws {
        let fixture = try CLIFixture()
        try fixture.succeed("add-generic-password", "-s", "svc", "-a", "gary", "-w", "g-secret")
        let result = try fixture.succeed("find-generic-password", "-s", "svc", "-a", "gary", "-g")
        #expect(result.stdout.contains(#""acct"<blob>="gary""#), "\(result)")
        #expect(!result.stdout.contains("g-secret"))
        #expect(result.stderr == "password: \"g-secret\"\n", "\(result)")
        try fixture.succeed("add-generic-password", "-s", "svc", "-a", "binary", stdin: Data([0x00, 0xFE]))
        #expect(
            try fixture.succeed("find-generic-password", "-s", "svc", "-a", "binary", "-g").stderr
                == "password: 0x00FE\n")
        let missing = try fixture.run("find-generic-password", "-s", "svc", "-a", "nobody", "-g")
        #expect(missing.status == 44 && missing.stderr == SecurityMessages.itemNotFound + "\n", "\(missing)")
    }

    @Test("add-generic-password -D and -G are stored; find matches on them")
    func kindAndGeneric() throws {
        let fixture = try CLIFixture()
        try fixture.succeed(
            "add-generic-password", "-s", "svc", "-a", "one", "-w", "first", "-D", "application password", "-G", "alpha"
        )
        try fixture.succeed(
            "add-generic-password", "-s", "svc", "-a", "two", "-w", "second", "-D", "note", "-G", "beta")
        let block = try fixture.succeed("find-generic-password", "-s", "svc", "-a", "one").stdout
        #expect(block.contains(#"    "desc"<blob>="application password""#), "\(block)")
        #expect(block.contains(#"    "gena"<blob>="alpha""#), "\(block)")

        #expect(try fixture.succeed("find-generic-password", "-s", "svc", "-G", "beta", "-w").stdout == "second\n")
        #expect(try fixture.succeed("find-generic-password", "-s", "svc", "-D", "note", "-w").stdout == "second\n")
        #expect(
            try fixture.succeed("find-generic-password", "-s", "svc", "-D", "application password", "-G", "alpha", "-w")
                .stdout == "first\n")
        let mismatch = try fixture.run("find-generic-password", "-s", "svc", "-a", "one", "-G", "beta")
        #expect(mismatch.status == 44 && mismatch.stderr == SecurityMessages.itemNotFound + "\n", "\(mismatch)")

        // -U keeps both when not given again, and replaces them when given.
        try fixture.succeed("add-generic-password", "-s", "svc", "-a", "one", "-w", "first-again", "-U")
        let kept = try fixture.succeed("find-generic-password", "-s", "svc", "-a", "one").stdout
        #expect(
            kept.contains(#""desc"<blob>="application password""#) && kept.contains(#""gena"<blob>="alpha""#), "\(kept)"
        )
        try fixture.succeed("add-generic-password", "-s", "svc", "-a", "one", "-w", "first-again", "-U", "-G", "gamma")
        #expect(
            try fixture.succeed("find-generic-password", "-s", "svc", "-G", "gamma", "-w").stdout == "first-again\n")

        // The protected write takes neither: refused rather than dropped.
        let protected = try fixture.run(
            "add-generic-password", "-s", "svc", "-a", "three", "-w", "x", "-D", "kind",
            "--accessible", "afterFirstUnlock")
        #expect(protected.status == 64, "\(protected)")
        #expect(try fixture.run("find-generic-password", "-s", "svc", "-a", "three").status == 44)
    }
}

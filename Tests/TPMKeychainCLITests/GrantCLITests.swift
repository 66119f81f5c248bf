import Foundation
import Testing

/// `tpm-keychain grants`: what a person types to grant, review and revoke, and what it refuses.
/// What grants decide is in AccessDecisionTests, GrantTests (the Secret Service) and
/// AgentWithOpenSSHTests (the ssh agent).
@Suite("the grants verbs")
struct GrantCLITests {
    static func grants(_ fixture: CLIFixture, _ verb: String, _ arguments: [String]) throws -> CLIResult {
        try CLI.run(["grants", verb, "--keychain", fixture.store] + arguments, environment: fixture.environment)
    }

    @Test("a grant is listed with whom, what, how long and why, and is gone once revoked")
    func grantListRevoke() throws {
        let fixture = try CLIFixture()
        try fixture.succeed("add-generic-password", "-s", "git.example", "-a", "ada", "-w", "token")
        #expect(
            try Self.grants(fixture, "list", []).stdout
                == "No grants: every program of yours may use what the keychain's own rules allow it.\n")
        let forItem = try Self.grants(
            fixture, "add",
            [
                "--allow", "--program", "/usr/bin/env", "--service", "git.example", "--account", "ada", "--session",
                "--purpose", "push to origin",
            ])
        #expect(forItem.status == 0, "\(forItem)")
        let id = forItem.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(id.count == 32 && id.allSatisfy(\.isHexDigit), "\(forItem)")
        let untilThen = try Self.grants(
            fixture, "add", ["--deny", "--unit", "ci.service", "--until", "2200-01-01T00:00:00Z"])
        #expect(untilThen.status == 0, "\(untilThen)")
        #expect(try Self.grants(fixture, "add", ["--allow", "--app-id", "org.example.App", "--once"]).status == 0)
        let listed = try Self.grants(fixture, "list", []).stdout.split(separator: "\n")
        #expect(listed.count == 3, "\(listed)")
        let real = URL(fileURLWithPath: "/usr/bin/env").resolvingSymlinksInPath().path
        #expect(
            listed.contains {
                $0.hasPrefix("\(id)  allow  executable \"\(real)\", sha256 ")
                    && $0.hasSuffix(
                        "  item \"git.example (ada)\"  for the login session it was made in  for \"push to origin\"")
            }, "\(listed)")
        #expect(
            listed.contains {
                $0.hasSuffix("deny  unit \"ci.service\"  the whole keychain  until 2200-01-01T00:00:00Z")
            })
        #expect(listed.contains { $0.hasSuffix("allow  app \"org.example.App\"  the whole keychain  for one use") })
        // An item's list: its own grants and the keychain's.
        let itemList = try Self.grants(fixture, "list", ["--service", "git.example", "--account", "ada"])
        #expect(itemList.stdout.split(separator: "\n").count == 3, "\(itemList)")
        #expect(try Self.grants(fixture, "revoke", [id]).stdout == "grant has been revoked.\n")
        #expect(!(try Self.grants(fixture, "list", []).stdout.contains(id)))
        let again = try Self.grants(fixture, "revoke", [id])
        #expect(again.status == 44 && again.lastErrorLine == SecurityMessages.itemNotFound, "\(again)")
    }

    @Test("grants are no face's items: the dump, a find and a delete of every item leave them be")
    func grantsAreNotItems() throws {
        let fixture = try CLIFixture()
        try fixture.succeed("add-generic-password", "-s", "git.example", "-a", "ada", "-w", "token")
        #expect(try Self.grants(fixture, "add", ["--deny", "--executable", "/usr/bin/python3"]).status == 0)
        let dump = try fixture.succeed("dump-keychain")
        #expect(dump.stdout.contains("git.example") && !dump.stdout.contains("tpm-keychain.grants"), "\(dump)")
        #expect(try fixture.run("find-generic-password", "-s", "grants").status != 0)
        let asked = try fixture.run("find-generic-password", "-s", "grants", "-G", "tpm-keychain.grants")
        #expect(asked.status != 0, "\(asked)")
        try fixture.succeed("delete-generic-password", "-s", "git.example", "-a", "ada")
        let python = URL(fileURLWithPath: "/usr/bin/python3").resolvingSymlinksInPath().path
        #expect(try Self.grants(fixture, "list", []).stdout.contains("deny  executable \"\(python)\""))
    }

    @Test("what it refuses, with what to do: nobody named, two leases, a time past, no such item, a malformed ID")
    func badInput() throws {
        let fixture = try CLIFixture()
        try fixture.succeed("add-generic-password", "-s", "git.example", "-a", "ada", "-w", "token")
        let cases: [([String], String)] = [
            (["add", "--allow"], "Name the program"),
            (["add", "--allow", "--unit", "a.service", "--once", "--session"], "at most one of"),
            (["add", "--allow", "--unit", "a.service", "--until", "2001-01-01T00:00:00Z"], "has passed already"),
            (["add", "--allow", "--unit", "a.service", "--until", "tomorrow"], "ISO 8601"),
            (
                ["add", "--allow", "--unit", "a.service", "--service", "git.example", "--account", "bob"],
                SecurityMessages.itemNotFound
            ),
            (["add", "--allow", "--unit", "a.service", "--service", "git.example"], "--service and --account"),
            (["add", "--allow", "--sha256", "12ab"], "64 hex digits"),
            (["add", "--allow", "--program", "/nonexistent/tool"], "is not a file"),
            (["add", "--allow", "--deny", "--unit", "a.service"], "already been set"),
            (["add", "--allow", "--unit", "a.service", "--until", "3000-01-01T00:00:00Z"], "before 2262"),
            (["revoke", "not-an-id"], "32 hex digits"),
        ]
        for (arguments, message) in cases {
            let result = try CLI.run(
                ["grants", arguments[0], "--keychain", fixture.store] + arguments.dropFirst(),
                environment: fixture.environment)
            #expect(result.status != 0, "\(result)")
            #expect(result.stderr.contains(message), "\(result)")
        }
        #expect(try Self.grants(fixture, "list", []).stdout.hasPrefix("No grants"))
    }

    @Test(
        "tpm-keychain confirm asks on the terminal: y allows once, r remembers, s for the session, n refuses; with no terminal the answer is no"
    )
    func confirmOnTheTerminal() throws {
        let question = "Allow \"secret-tool\" (pid 1) to read \"token\" of the keyring \"Login\"?"
        for (typed, status, printed) in [("y", 0, ""), ("r", 0, "remember"), ("s", 0, "session"), ("n", 1, "")]
            as [(String, Int32, String)]
        {
            // script(1) gives the command a terminal whose input is ours.
            let answered = try CLI.run(
                ["-qec", "\(CLI.executable) confirm", "/dev/null"],
                environment: ["TPM_KEYCHAIN_PROMPT_REASON": question], stdin: Data((typed + "\n").utf8),
                executable: "/usr/bin/script")
            #expect(answered.status == status, "\(typed): \(answered)")
            #expect(answered.stdout.contains(question), "the question is shown: \(answered)")
            // What follows the prompt on the terminal is what the command printed.
            let after = answered.stdout.components(separatedBy: "[n] no: ").last ?? ""
            #expect(after.trimmingCharacters(in: .whitespacesAndNewlines) == printed, "\(typed): \(answered)")
        }
        let detached = try CLI.run(
            ["--wait", CLI.executable, "confirm"], environment: ["TPM_KEYCHAIN_PROMPT_REASON": question],
            executable: "/usr/bin/setsid")
        #expect(detached.status == 1 && detached.stderr.contains("no terminal"), "\(detached)")
    }
}

import Foundation
import Testing

/// The device verbs and access-controlled items, as a script would drive them.
@Suite("access control verbs")
struct AccessControlCLITests {
    static let passcode = "4711 correct horse"

    @Test("rotate-keys re-encrypts plain and passcode items under a new master key, asking for the passcode once")
    func rotateKeys() throws {
        let fixture = try CLIFixture()
        try fixture.succeed("set-passcode", "--passcode-fd", "0", stdin: Data((Self.passcode + "\n").utf8))
        try fixture.succeed("add-generic-password", "-s", "svc", "-a", "plain", "-w", "open value")
        for account in ["pin-1", "pin-2"] {
            try fixture.succeed(
                "add-generic-password", "-s", "svc", "-a", account, "--access-control", "devicePasscode",
                "--accessible", account == "pin-1" ? "whenUnlocked" : "afterFirstUnlock", "-w", "guarded " + account)
        }
        let metadata = try Data(contentsOf: URL(fileURLWithPath: fixture.store + "/store.meta"))
        // Without a way to ask for the passcode (no descriptor, no terminal): refused, nothing changed.
        var environment = fixture.environment
        environment["TPM_KEYCHAIN_AUTHENTICATOR"] = "none"
        let refused = try CLI.run(
            ["rotate-keys", "--keychain", fixture.store, "--passcode-fd", "0"], environment: environment, stdin: Data())
        #expect(refused.status != 0, "\(refused)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: fixture.store + "/store.meta")) == metadata)
        // Two passcode records, one line on the descriptor: asked once.
        let rotated = try CLI.run(
            ["rotate-keys", "--keychain", fixture.store, "--passcode-fd", "0"], environment: environment,
            stdin: Data((Self.passcode + "\n").utf8))
        #expect(rotated.status == 0, "\(rotated)")
        #expect(
            rotated.stdout == "rotated the master key of \(fixture.store): 3 items and 2 key records re-encrypted\n",
            "\(rotated)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: fixture.store + "/store.meta")) != metadata)
        #expect(try fixture.succeed("find-generic-password", "-s", "svc", "-a", "plain", "-w").stdout == "open value\n")
        for account in ["pin-1", "pin-2"] {
            let found = try fixture.succeed(
                "find-generic-password", "-s", "svc", "-a", account, "-w", "--passcode-fd", "0",
                stdin: Data((Self.passcode + "\n").utf8))
            #expect(found.stdout == "guarded \(account)\n")
        }
        let missing = try CLI.run(
            ["rotate-keys", "--keychain", fixture.directory + "/none"], environment: fixture.environment)
        #expect(missing.status == 66, "\(missing)")
    }

    @Test("set-passcode, a devicePasscode item, a wrong passcode (77), tpm-status, change and remove")
    func passcodeLifecycle() throws {
        let fixture = try CLIFixture()
        try fixture.succeed("set-passcode", "--passcode-fd", "0", stdin: Data((Self.passcode + "\n").utf8))
        try fixture.succeed(
            "add-generic-password", "-s", "svc", "-a", "pin", "--access-control", "devicePasscode",
            "--accessible", "whenUnlockedThisDeviceOnly", "-w", "guarded")
        let found = try fixture.succeed(
            "find-generic-password", "-s", "svc", "-a", "pin", "-w", "--passcode-fd", "0",
            stdin: Data((Self.passcode + "\n").utf8))
        #expect(found.stdout == "guarded\n")
        let wrong = try fixture.run(
            "find-generic-password", "-s", "svc", "-a", "pin", "-w", "--passcode-fd", "0",
            stdin: Data("nope-nope\n".utf8))
        #expect(wrong.status == 77, "\(wrong)")
        #expect(wrong.stderr.contains("Wrong device passcode"))
        let status = try fixture.succeed("tpm-status")
        #expect(status.stdout.contains("passcode:          set"))
        #expect(status.stdout.contains("lockout counter:   1 failed authorizations"), "\(status.stdout)")
        #expect(status.stdout.contains("passcode counter:  1"))

        try fixture.succeed(
            "change-passcode", "--passcode-fd", "0", stdin: Data((Self.passcode + "\nnew passcode 99\n").utf8))
        #expect(
            try fixture.succeed(
                "find-generic-password", "-s", "svc", "-a", "pin", "-w", "--passcode-fd", "0",
                stdin: Data("new passcode 99\n".utf8)
            ).stdout == "guarded\n")
        let old = try fixture.run(
            "find-generic-password", "-s", "svc", "-a", "pin", "-w", "--passcode-fd", "0",
            stdin: Data((Self.passcode + "\n").utf8))
        #expect(old.status == 77, "\(old)")
        #expect(try fixture.succeed("tpm-status").stdout.contains("passcode counter:  2"))

        try fixture.succeed("remove-passcode", "--passcode-fd", "0", stdin: Data("new passcode 99\n".utf8))
        let gone = try fixture.run(
            "find-generic-password", "-s", "svc", "-a", "pin", "-w", "--passcode-fd", "0",
            stdin: Data("whatever1\n".utf8))
        #expect(gone.status == 44, "\(gone)")
        #expect(gone.stderr.contains("purge-invalidated"), "\(gone)")
        // Kept until purged: its attributes still list.
        try fixture.succeed("find-generic-password", "-s", "svc", "-a", "pin")
        #expect(try fixture.succeed("purge-invalidated").stdout.contains(": 1 items and 1 key records"))
        #expect(try fixture.run("find-generic-password", "-s", "svc", "-a", "pin").status == 44)
    }

    @Test(
        "lock-keychain makes whenUnlocked items unreadable (77) until unlock-keychain; afterFirstUnlock items stay readable"
    )
    func lockAndUnlock() throws {
        let fixture = try CLIFixture()
        // Without a passcode a keychain cannot be locked.
        #expect(try fixture.run("lock-keychain").status == 77)
        try fixture.succeed("set-passcode", "--passcode-fd", "0", stdin: Data((Self.passcode + "\n").utf8))
        try fixture.succeed(
            "add-generic-password", "-s", "svc", "-a", "ak", "--accessible", "whenUnlocked", "-w", "ak-value")
        try fixture.succeed(
            "add-generic-password", "-s", "svc", "-a", "ck", "--accessible", "afterFirstUnlock", "-w", "ck-value")
        #expect(try fixture.succeed("find-generic-password", "-s", "svc", "-a", "ak", "-w").stdout == "ak-value\n")
        try fixture.succeed("lock-keychain")
        let locked = try fixture.run("find-generic-password", "-s", "svc", "-a", "ak", "-w")
        #expect(locked.status == 77, "\(locked)")
        #expect(locked.stderr.contains("locked"))
        #expect(try fixture.succeed("find-generic-password", "-s", "svc", "-a", "ck", "-w").stdout == "ck-value\n")
        #expect(try fixture.succeed("tpm-status").stdout.contains("lock state:        locked"))
        let wrong = try fixture.run("unlock-keychain", "--passcode-fd", "0", stdin: Data("wrong-one\n".utf8))
        #expect(wrong.status == 77)
        try fixture.succeed("unlock-keychain", "--passcode-fd", "0", stdin: Data((Self.passcode + "\n").utf8))
        #expect(try fixture.succeed("find-generic-password", "-s", "svc", "-a", "ak", "-w").stdout == "ak-value\n")
    }

    @Test("a userPresence item falls back to the passcode when no fingerprint reader answers")
    func userPresenceWithoutReader() throws {
        let fixture = try CLIFixture()
        try fixture.succeed("set-passcode", "--passcode-fd", "0", stdin: Data((Self.passcode + "\n").utf8))
        try fixture.succeed(
            "add-generic-password", "-s", "svc", "-a", "either", "--access-control", "userPresence", "-w",
            "either-value")
        for extra in [
            ["DBUS_SYSTEM_BUS_ADDRESS": "unix:path=/nonexistent/bus"], ["TPM_KEYCHAIN_AUTHENTICATOR": "none"],
        ] {
            var environment = fixture.environment
            for (name, value) in extra { environment[name] = value }
            let found = try CLI.run(
                [
                    "find-generic-password", "--keychain", fixture.store, "-s", "svc", "-a", "either", "-w",
                    "--passcode-fd", "0",
                ],
                environment: environment, stdin: Data((Self.passcode + "\n").utf8))
            #expect(found.status == 0 && found.stdout == "either-value\n", "\(extra): \(found)")
        }
        // biometry alone cannot fall back: not available (69).
        try fixture.succeed(
            "add-generic-password", "-s", "svc", "-a", "bio", "--access-control", "biometryAny", "-w", "bio-value")
        var environment = fixture.environment
        environment["DBUS_SYSTEM_BUS_ADDRESS"] = "unix:path=/nonexistent/bus"
        let refused = try CLI.run(
            ["find-generic-password", "--keychain", fixture.store, "-s", "svc", "-a", "bio", "-w"],
            environment: environment)
        #expect(refused.status == 69, "\(refused)")
    }

    @Test("bad access-control arguments are usage errors (64) and store nothing")
    func badArguments() throws {
        let fixture = try CLIFixture()
        for arguments in [
            ["--access-control", "faceUnlock"], ["--access-control", "biometryAny,biometryCurrentSet"],
            ["--accessible", "sometimes"], ["--access-control", "userPresence,devicePasscode"],
        ] {
            let result = try CLI.run(
                ["add-generic-password", "--keychain", fixture.store, "-s", "svc", "-a", "x", "-w", "v"] + arguments,
                environment: fixture.environment)
            #expect(result.status == 64, "\(arguments): \(result)")
        }
        #expect(!FileManager.default.fileExists(atPath: fixture.store))
    }

    @Test("the demo shows a biometry item read, the enrollment changing, and the TPM refusing the item")
    func demoShowsInvalidation() throws {
        let fixture = try CLIFixture()
        let result = try CLI.run(["demo", "--keychain", fixture.store], environment: fixture.environment)
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout.contains("correct horse battery staple    (after a simulated Face ID match)"))
        #expect(result.stdout.contains("refused: The biometric enrollment changed"))
        #expect(result.stdout.contains("PolicyNV fails for good"))
    }
}

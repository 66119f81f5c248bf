import Foundation
import TPMKeychainTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

extension SecretServiceSuites {
    /// A collection whose unlock asks for the device passcode: Unlock returns a prompt, Prompt()
    /// runs the daemon's passcode command, Completed carries the outcome, and the TPM (the items'
    /// key record) enforces it, not the daemon's flag.
    @Suite
    struct LockedCollectionTests {
        static let passcode = "collection passcode 2026"

        /// A daemon whose passcode command prints the file `passcode` in the fixture's directory (a
        /// test writes a right or a wrong one), after waiting for the file `go` when it exists.
        func fixture() throws -> SecretServiceFixture {
            let fixture = try SecretServiceFixture(startDaemon: false)
            let setPasscode = try fixture.run(
                SecretServiceFixture.tool,
                ["set-passcode", "--passcode-fd", "0", "--keychain", fixture.dataDirectory + "/default"],
                stdin: Self.passcode + "\n")
            #expect(setPasscode.status == 0, "\(setPasscode)")
            try Self.passcode.write(toFile: fixture.directory + "/passcode", atomically: true, encoding: .utf8)
            let command =
                "while [ -e \(fixture.directory)/hold ]; do sleep 0.05; done; cat \(fixture.directory)/passcode"
            try fixture.startDaemon(
                extraArguments: ["--passcode-command", command, "--audit-log", fixture.directory + "/audit.log"])
            return fixture
        }

        func step(_ fixture: SecretServiceFixture, _ arguments: String...) throws -> String {
            let run = try fixture.python("locked_collection.py", arguments)
            #expect(run.status == 0, "\(run)\n\(fixture.daemonLogs())")
            return run.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        }

        @Test(
            "created locked; unlocked by the passcode through a prompt; locked again; a wrong passcode leaves it locked"
        )
        func passcodeCollection() throws {
            let fixture = try fixture()
            defer { fixture.stop() }
            let created = try step(fixture, "create", "Vault")
            #expect(created.hasPrefix("created ") && created.hasSuffix("locked=True"), "\(created)")
            let path = String(created.split(separator: " ")[1])
            #expect(try step(fixture, "store", path, "a1", "first secret") == "error locked")

            #expect(try step(fixture, "unlock", path) == "unlock dismissed=False locked=False")
            #expect(try step(fixture, "store", path, "a1", "first secret") == "stored")
            #expect(try step(fixture, "read", path, "a1") == "secret first secret")

            #expect(try step(fixture, "lock", path) == "locked=True")
            #expect(try step(fixture, "read", path, "a1") == "error org.freedesktop.Secret.Error.IsLocked")

            try "wrong passcode".write(toFile: fixture.directory + "/passcode", atomically: true, encoding: .utf8)
            #expect(try step(fixture, "unlock", path) == "unlock dismissed=True locked=True")
            #expect(try step(fixture, "read", path, "a1") == "error org.freedesktop.Secret.Error.IsLocked")

            try Self.passcode.write(toFile: fixture.directory + "/passcode", atomically: true, encoding: .utf8)
            #expect(try step(fixture, "unlock", path) == "unlock dismissed=False locked=False")
            #expect(try step(fixture, "read", path, "a1") == "secret first secret")

            // The audit log names the caller, the action and the labels, never the secret.
            let audit = (try? String(contentsOfFile: fixture.directory + "/audit.log", encoding: .utf8)) ?? ""
            #expect(audit.contains(#" read collection="Vault" item="locked a1""#), "\(audit)")
            #expect(
                audit.contains("exe=\"/usr/bin/python3") && audit.contains(#/exe_sha256=[0-9a-f]{64} /#), "\(audit)")
            // The chain that started the caller, from the kernel: this test ran python3.
            #expect(audit.contains(#/ chain="[^"]* → python3[^"]*"/#), "\(audit)")
            #expect(audit.contains("unlock prompt failed"), "\(audit)")
            #expect(!audit.contains("first secret") && !audit.contains(Self.passcode), "\(audit)")
        }

        @Test("a grant that allows the program opens nothing: a passcode collection stays locked until the passcode")
        func grantDoesNotUnlock() throws {
            let fixture = try fixture()
            defer { fixture.stop() }
            let created = try step(fixture, "create", "Vault")
            let path = String(created.split(separator: " ")[1])
            #expect(try step(fixture, "unlock", path) == "unlock dismissed=False locked=False")
            #expect(try step(fixture, "store", path, "a1", "first secret") == "stored")
            #expect(try step(fixture, "lock", path) == "locked=True")
            let python = URL(fileURLWithPath: SecretServiceFixture.python).resolvingSymlinksInPath().path
            let granted = try fixture.run(
                SecretServiceFixture.tool,
                ["grants", "add", "--keychain", fixture.dataDirectory + "/vault", "--allow", "--program", python])
            #expect(granted.status == 0, "\(granted)")
            #expect(try step(fixture, "read", path, "a1") == "error org.freedesktop.Secret.Error.IsLocked")
            try "wrong passcode".write(toFile: fixture.directory + "/passcode", atomically: true, encoding: .utf8)
            #expect(try step(fixture, "unlock", path) == "unlock dismissed=True locked=True")
            #expect(try step(fixture, "read", path, "a1") == "error org.freedesktop.Secret.Error.IsLocked")
            try Self.passcode.write(toFile: fixture.directory + "/passcode", atomically: true, encoding: .utf8)
            #expect(try step(fixture, "unlock", path) == "unlock dismissed=False locked=False")
            #expect(try step(fixture, "read", path, "a1") == "secret first secret")
        }

        @Test("a userPresence collection with no biometric authenticator unlocks with the device passcode")
        func userPresenceFallsBackToThePasscode() throws {
            let fixture = try fixture()
            defer { fixture.stop() }
            let created = try step(fixture, "create", "Presence", "userPresence")
            #expect(created.hasSuffix("locked=True"), "\(created)")
            let path = String(created.split(separator: " ")[1])
            #expect(try step(fixture, "unlock", path) == "unlock dismissed=False locked=False")
            #expect(try step(fixture, "store", path, "p1", "present") == "stored")
            #expect(try step(fixture, "lock", path) == "locked=True")
            #expect(try step(fixture, "read", path, "p1") == "error org.freedesktop.Secret.Error.IsLocked")
            try "wrong passcode".write(toFile: fixture.directory + "/passcode", atomically: true, encoding: .utf8)
            #expect(try step(fixture, "unlock", path) == "unlock dismissed=True locked=True")
            try Self.passcode.write(toFile: fixture.directory + "/passcode", atomically: true, encoding: .utf8)
            #expect(try step(fixture, "unlock", path) == "unlock dismissed=False locked=False")
            #expect(try step(fixture, "read", path, "p1") == "secret present")
        }

        @Test("the TPM gates the items: the store's own CLI cannot read one without the passcode")
        func theTPMEnforcesIt() throws {
            let fixture = try fixture()
            defer { fixture.stop() }
            let path = String(try step(fixture, "create", "Gated").split(separator: " ")[1])
            _ = try step(fixture, "unlock", path)
            #expect(try step(fixture, "store", path, "gated", "behind the passcode") == "stored")
            let store = fixture.dataDirectory + "/gated"
            let without = try fixture.run(
                SecretServiceFixture.tool,
                ["find-generic-password", "-s", "vault", "-a", "gated", "-w", "--keychain", store])
            #expect(without.status != 0 && !without.stdout.contains("behind the passcode"), "\(without)")
            let with = try fixture.run(
                SecretServiceFixture.tool,
                [
                    "find-generic-password", "-s", "vault", "-a", "gated", "-w", "--passcode-fd", "0", "--keychain",
                    store,
                ],
                stdin: Self.passcode + "\n")
            #expect(with.status == 0 && with.stdout == "behind the passcode\n", "\(with)")
        }

        @Test("a client that leaves mid-prompt unlocks nothing, and the next unlock works")
        func clientVanishesMidPrompt() throws {
            let fixture = try fixture()
            defer { fixture.stop() }
            let path = String(try step(fixture, "create", "Left").split(separator: " ")[1])
            // The passcode command waits while `hold` exists: the client leaves during the prompt.
            _ = FileManager.default.createFile(atPath: fixture.directory + "/hold", contents: nil)
            #expect(try step(fixture, "vanish", path).hasPrefix("vanished "))
            try FileManager.default.removeItem(atPath: fixture.directory + "/hold")
            // Observed progress: the daemon records the prompt's end once the passcode was given.
            let deadline = ContinuousClock.now + .seconds(60)
            while !((try? String(contentsOfFile: fixture.directory + "/audit.log", encoding: .utf8)) ?? "").contains(
                "after its caller left")
            {
                #expect(ContinuousClock.now < deadline, "the prompt never ended")
                if ContinuousClock.now > deadline { return }
                usleep(10_000)
            }
            #expect(try step(fixture, "state", path) == "locked=True")
            #expect(try step(fixture, "unlock", path) == "unlock dismissed=False locked=False")
            #expect(fixture.daemon?.isRunning == true)
        }
    }

    /// `--lock-with-session`: logind (python-dbusmock's, Fixtures/logind/) on the fixture's bus.
    @Suite
    struct SessionLockTests {
        @Test("when the login session locks, every collection locks and forgets its opened key; it stays locked after")
        func collectionsFollowTheSessionLock() throws {
            let fixture = try SecretServiceFixture(startDaemon: false)
            defer { fixture.stop() }
            let logind = try fixture.startMock("logind")
            defer { logind.stop() }
            func control(_ arguments: String...) throws -> String { try logind.control(arguments) }
            _ = try control("add-session", "c7", String(getuid()), "tester")
            try fixture.startDaemon(
                extraArguments: [
                    "--lock-with-session", "--logind-address", fixture.address, "--logind-session", "c7",
                    "--audit-log", fixture.directory + "/audit.log",
                ])
            let store = try fixture.secretTool(
                ["store", "--label", "x", "service", "vault", "account", "a"], stdin: "value")
            #expect(store.status == 0, "\(store)")
            let state = try fixture.python(
                "locked_collection.py", ["state", "/org/freedesktop/secrets/collection/default"])
            #expect(state.stdout == "locked=False\n", "\(state)")

            _ = try control("set-locked-hint", "c7", "true")
            // Observed progress: the daemon records the lock.
            let deadline = ContinuousClock.now + .seconds(60)
            while !((try? String(contentsOfFile: fixture.directory + "/audit.log", encoding: .utf8)) ?? "").contains(
                "the login session locked")
            {
                guard ContinuousClock.now < deadline else {
                    Issue.record("the daemon did not follow the session lock\n\(fixture.daemonLogs())")
                    return
                }
                usleep(20_000)
            }
            let locked = try fixture.python(
                "locked_collection.py", ["read", "/org/freedesktop/secrets/collection/default", "a"])
            #expect(locked.stdout == "error org.freedesktop.Secret.Error.IsLocked\n", "\(locked)")
            _ = try control("set-locked-hint", "c7", "false")
            let after = try fixture.python(
                "locked_collection.py", ["state", "/org/freedesktop/secrets/collection/default"])
            #expect(after.stdout == "locked=True\n", "stays locked until a client unlocks it: \(after)")
        }
    }

    /// `--fprintd`: python-dbusmock's fprintd (Fixtures/fprintd/) on the fixture's bus.
    @Suite
    struct BiometryCollectionTests {
        @Test(
            "a biometryCurrentSet collection unlocks with a matching finger, and never again once the enrolled fingers change"
        )
        func biometryCurrentSetCollection() throws {
            let fixture = try SecretServiceFixture(startDaemon: false)
            defer { fixture.stop() }
            let fprintd = try fixture.startMock("fprintd")
            defer { fprintd.stop() }
            func control(_ arguments: String...) throws -> String { try fprintd.control(arguments) }
            let device = try control("add-device", "Virtual reader")
            _ = try control("set-fingers", device, "right-index-finger")
            _ = try control("set-script", device, #"[["verify-match", true, 0]]"#)
            try fixture.startDaemon(
                extraArguments: ["--fprintd-address", fixture.address, "--audit-log", fixture.directory + "/audit.log"])
            func step(_ arguments: String...) throws -> String {
                let run = try fixture.python("locked_collection.py", arguments)
                #expect(run.status == 0, "\(run)\n\(fixture.daemonLogs())")
                return run.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            }
            let created = try step("create", "Fingers", "biometryCurrentSet")
            #expect(created.hasSuffix("locked=True"), "\(created)\n\(fixture.daemonLogs())")
            let path = String(created.split(separator: " ")[1])
            #expect(try step("unlock", path) == "unlock dismissed=False locked=False")
            #expect(try step("store", path, "f1", "by finger") == "stored")
            #expect(try step("read", path, "f1") == "secret by finger")

            #expect(try step("lock", path) == "locked=True")
            _ = try control("set-fingers", device, "right-index-finger", "left-index-finger")
            #expect(try step("unlock", path) == "unlock dismissed=True locked=True")
            // Permanently: the TPM's enrollment counter moved on; the old finger set does not bring it back.
            _ = try control("set-fingers", device, "right-index-finger")
            #expect(try step("unlock", path) == "unlock dismissed=True locked=True")
            #expect(try step("read", path, "f1") == "error org.freedesktop.Secret.Error.IsLocked")
            let audit = (try? String(contentsOfFile: fixture.directory + "/audit.log", encoding: .utf8)) ?? ""
            #expect(audit.contains("unlock prompt failed"), "\(audit)")
        }
    }
}

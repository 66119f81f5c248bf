import Foundation
import TPMKeychainTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

extension SecretServiceSuites {
    /// Moving in from a real gnome-keyring-daemon (Debian's gnome-keyring) on the fixture's private
    /// bus: every item copied with its label, attributes and secret, the source left as it was, and
    /// a second import rewriting rather than duplicating.
    @Suite
    struct ImportTests {
        @Test(
            "tpm-keychain secret-service import copies gnome-keyring's items, leaves them there, and does not duplicate on a second run"
        )
        func importFromGnomeKeyring() throws {
            let fixture = try SecretServiceFixture(startDaemon: false)
            defer { fixture.stop() }
            let keyringHome = fixture.directory + "/gnome"
            try FileManager.default.createDirectory(atPath: keyringHome + "/run", withIntermediateDirectories: true)
            var environment = fixture.environment
            environment["HOME"] = keyringHome
            environment["XDG_DATA_HOME"] = keyringHome + "/data"
            environment["XDG_RUNTIME_DIR"] = keyringHome + "/run"
            environment["XDG_CONFIG_HOME"] = keyringHome + "/config"
            // --unlock reads the login keyring's password from standard input.
            let gnome = try SecretServiceFixture.launch(
                "/usr/bin/gnome-keyring-daemon", ["--foreground", "--components=secrets", "--unlock"],
                environment: environment, output: fixture.directory + "/gnome-keyring.log", stdin: "password")
            defer {
                kill(gnome.processIdentifier, SIGKILL)
                gnome.waitUntilExit()
            }
            // Observed progress: the first store succeeds once gnome-keyring owns the name.
            var first = try fixture.secretTool(
                ["store", "--label", "item 0", "service", "gk", "account", "user0"], stdin: "secret 0")
            let deadline = ContinuousClock.now + .seconds(60)
            while first.status != 0 && ContinuousClock.now < deadline && gnome.isRunning {
                usleep(50_000)
                first = try fixture.secretTool(
                    ["store", "--label", "item 0", "service", "gk", "account", "user0"], stdin: "secret 0")
            }
            try #require(first.status == 0, "gnome-keyring did not come up: \(first)\n\(fixture.daemonLogs())")
            for number in 1..<20 {
                let store = try fixture.secretTool(
                    ["store", "--label", "item \(number)", "service", "gk", "account", "user\(number)"],
                    stdin: "secret \(number)")
                #expect(store.status == 0, "\(store)")
            }
            let odd = try fixture.secretTool(
                ["store", "--label", "ünïcode", "weird", "α β", "empty", ""], stdin: "odd\nvalue")
            #expect(odd.status == 0, "\(odd)")

            let importing = ["secret-service", "import", "--data-directory", fixture.dataDirectory]
            let imported = try fixture.run(SecretServiceFixture.tool, importing)
            #expect(imported.status == 0 && imported.stdout.hasPrefix("Imported 21 items"), "\(imported)")
            let again = try fixture.run(SecretServiceFixture.tool, importing)
            #expect(again.status == 0 && again.stdout.hasPrefix("Imported 21 items"), "\(again)")
            let stillThere = try fixture.secretTool(["lookup", "service", "gk", "account", "user7"])
            #expect(stillThere.stdout == "secret 7", "the source keeps its items: \(stillThere)")

            kill(gnome.processIdentifier, SIGKILL)
            gnome.waitUntilExit()
            try fixture.startDaemon()
            for number in 0..<20 {
                let lookup = try fixture.secretTool(["lookup", "service", "gk", "account", "user\(number)"])
                #expect(lookup.stdout == "secret \(number)", "\(lookup)")
            }
            let search = try fixture.secretTool(["search", "--all", "weird", "α β"])
            #expect(
                search.stdout.contains("label = ünïcode") && search.stdout.contains("secret = odd\nvalue"), "\(search)")
            #expect(search.stderr.contains("attribute.empty = "), "\(search)")
            let all = try fixture.secretTool(["search", "--all", "service", "gk"])
            #expect(all.stdout.components(separatedBy: "label = item").count - 1 == 20, "no duplicates: \(all)")
        }
    }
}

extension SecretServiceSuites.ImportTests {
    @Test(
        "collections are kept: the source's default collection goes into --into, another into a store named after its label, the session collection stays; --merge puts all in one"
    )
    func collectionsKept() throws {
        // The source is another tpm-keychain provider, which creates collections without a prompt.
        let fixture = try SecretServiceFixture()
        defer { fixture.stop() }
        #expect(
            try fixture.secretTool(
                ["store", "--label", "home", "service", "home", "account", "h"], stdin: "home secret"
            )
            .status == 0)
        _ = try fixture.createCollection(label: "Work Stuff", properties: "")
        let created = try fixture.run(
            SecretServiceFixture.python,
            [
                "-c",
                """
                import secretstorage
                bus = secretstorage.dbus_init()
                work = [c for c in secretstorage.get_all_collections(bus) if c.get_label() == 'Work Stuff'][0]
                work.create_item('work item', {'service': 'work', 'account': 'w'}, b'work secret')
                session = secretstorage.Collection(bus, '/org/freedesktop/secrets/collection/session')
                session.create_item('session item', {'service': 'session', 'account': 's'}, b'gone at logout')
                """,
            ])
        #expect(created.status == 0, "\(created)")

        let kept = fixture.directory + "/kept"
        let imported = try fixture.run(
            SecretServiceFixture.tool, ["secret-service", "import", "--data-directory", kept])
        #expect(imported.status == 0, "\(imported)")
        #expect(imported.stdout.hasPrefix("Imported 2 items from 2 collections into "), "\(imported)")
        let stores = try FileManager.default.contentsOfDirectory(atPath: kept).sorted()
        #expect(stores == ["default", "work_stuff"], "\(stores)")
        for (store, service, account, secret) in [
            ("default", "home", "h", "home secret"), ("work_stuff", "work", "w", "work secret"),
        ] {
            let found = try fixture.run(
                SecretServiceFixture.tool,
                ["find-generic-password", "--keychain", kept + "/" + store, "-s", service, "-a", account, "-w"])
            #expect(found.stdout == secret + "\n", "\(store): \(found)")
        }

        let merged = fixture.directory + "/merged"
        let all = try fixture.run(
            SecretServiceFixture.tool, ["secret-service", "import", "--data-directory", merged, "--merge"])
        #expect(all.stdout.hasPrefix("Imported 2 items from 2 collections into default"), "\(all)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: merged) == ["default"])
    }
}

import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The Secret portal's backend (`secret-service --portal`) behind Debian's xdg-desktop-portal on
/// the fixture's bus, with libsecret's secret-tool in a bubblewrap sandbox that the portal takes
/// for a Flatpak app (a `/.flatpak-info` in its root): libsecret asks the portal for its app's
/// secret and keeps its items in its own file, encrypted with it.
@Suite("the Secret portal, with xdg-desktop-portal and libsecret in a sandbox", .serialized)
struct SecretPortalTests {
    static let portal = "/usr/libexec/xdg-desktop-portal"
    static let fixtures = SecretServiceFixture.fixtures

    /// xdg-desktop-portal on the fixture's bus, choosing our backend; up once it owns its name.
    static func startPortal(_ fixture: SecretServiceFixture) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: portal)
        var environment = fixture.environment
        // The portal file Scripts/install-cli.sh --portal installs, and the choice for 1.17 and later.
        environment["XDG_DESKTOP_PORTAL_DIR"] =
            URL(fileURLWithPath: fixtures).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Scripts/secret-portal").path
        environment["XDG_CURRENT_DESKTOP"] = "tpmkeychain"
        process.environment = environment
        let log = fixture.directory + "/portal.log"
        _ = FileManager.default.createFile(atPath: log, contents: nil)
        process.standardOutput = FileHandle(forWritingAtPath: log)
        process.standardError = FileHandle(forWritingAtPath: log)
        try process.run()
        let check = """
            from jeepney import DBusAddress, new_method_call
            from jeepney.io.blocking import open_dbus_connection
            bus = DBusAddress('/org/freedesktop/DBus', bus_name='org.freedesktop.DBus', interface='org.freedesktop.DBus')
            reply = open_dbus_connection(bus='SESSION').send_and_get_reply(
                new_method_call(bus, 'NameHasOwner', 's', ('org.freedesktop.portal.Desktop',)))
            print(reply.body[0])
            """
        let deadline = ContinuousClock.now + .seconds(120)
        while try fixture.run(SecretServiceFixture.python, ["-c", check]).stdout != "True\n" {
            guard process.isRunning, ContinuousClock.now < deadline else {
                throw FixtureError(
                    "xdg-desktop-portal did not start: \((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
            }
            usleep(50_000)
        }
        return process
    }

    /// `command` in a sandbox that xdg-desktop-portal takes for the Flatpak app `application`,
    /// with a home of its own and the fixture's bus.
    static func sandboxed(
        _ fixture: SecretServiceFixture, as application: String, _ command: [String], stdin: String? = nil
    ) throws -> ClientRun {
        try fixture.run("/usr/bin/bwrap", try sandbox(fixture, as: application) + command, stdin: stdin)
    }

    /// bubblewrap's arguments for a sandbox of the Flatpak app `application`.
    static func sandbox(_ fixture: SecretServiceFixture, as application: String) throws -> [String] {
        let info = fixture.directory + "/\(application).flatpak-info"
        try "[Application]\nname=\(application)\n".write(toFile: info, atomically: true, encoding: .utf8)
        let home = fixture.directory + "/home-\(application)"
        try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
        return [
            "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin",
            "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--ro-bind", "/etc", "/etc",
            "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/run",
            "--ro-bind", info, "/.flatpak-info", "--bind", fixture.directory + "/bus", "/run/flatpak/bus",
            "--ro-bind", fixtures, "/fixtures", "--bind", home, "/home/app",
            "--setenv", "HOME", "/home/app", "--setenv", "XDG_DATA_HOME", "/home/app/.local/share",
            "--setenv", "XDG_RUNTIME_DIR", "/run", "--setenv", "DBUS_SESSION_BUS_ADDRESS",
            "unix:path=/run/flatpak/bus",
        ]
    }

    /// A fixture whose daemon also serves the portal's backend, with xdg-desktop-portal in
    /// front of it, for `body`; both stopped afterwards.
    static func withPortal(
        anyUserMayConnect: Bool = false, _ body: (SecretServiceFixture) throws -> Void
    ) throws {
        let fixture = try SecretServiceFixture(anyUserMayConnect: anyUserMayConnect, startDaemon: false)
        defer { fixture.stop() }
        try fixture.startDaemon(extraArguments: ["--portal"])
        let portal = try startPortal(fixture)
        defer {
            kill(portal.processIdentifier, SIGKILL)
            portal.waitUntilExit()
        }
        try body(fixture)
    }

    static func secret(_ fixture: SecretServiceFixture, of application: String) throws -> String {
        try sandboxed(fixture, as: application, ["/usr/bin/python3", "/fixtures/portal_client.py", "frontend"]).stdout
            .trimmingCharacters(in: .whitespacesAndNewlines)
    }

    @Test(
        "libsecret in a sandbox stores and finds its secret through the portal, also after a daemon restart; each app gets its own 64-byte secret, always the same; a host program, a caller that is not the portal and a locked keychain get none"
    )
    func sandboxedLibsecret() throws {
        try Self.withPortal { fixture in
            let app = "org.example.App"
            let stored = try Self.sandboxed(
                fixture, as: app,
                ["/usr/bin/secret-tool", "store", "--label", "demo", "service", "demo", "user", "alice"],
                stdin: "hunter2")
            #expect(stored.status == 0, "\(stored)\n\(fixture.daemonLogs())")
            let lookup = ["/usr/bin/secret-tool", "lookup", "service", "demo", "user", "alice"]
            #expect(try Self.sandboxed(fixture, as: app, lookup).stdout == "hunter2")
            let keyring = fixture.directory + "/home-\(app)/.local/share/keyrings/default.keyring"
            let file = try Data(contentsOf: URL(fileURLWithPath: keyring))
            #expect(file.range(of: Data("hunter2".utf8)) == nil, "libsecret's file holds the secret encrypted")

            let first = try Self.secret(fixture, of: app)
            #expect(first.count == 128 && first.allSatisfy(\.isHexDigit), "64 bytes: \(first)")
            #expect(try Self.secret(fixture, of: app) == first)
            let other = try Self.secret(fixture, of: "org.example.Other")
            #expect(other.count == 128 && other != first)

            // Derived again by the TPM after a restart: the same secret, so the same items.
            fixture.stopDaemon()
            try fixture.startDaemon(extraArguments: ["--portal"])
            #expect(try Self.secret(fixture, of: app) == first)
            #expect(try Self.sandboxed(fixture, as: app, lookup).stdout == "hunter2")

            // A program outside a sandbox, and one that calls the backend itself, get nothing.
            let host = try fixture.run(SecretServiceFixture.python, [Self.fixtures + "/portal_client.py", "frontend"])
            #expect(host.stdout.hasPrefix("error") || host.stdout.hasPrefix("response"), "\(host)")
            let direct = try fixture.run(SecretServiceFixture.python, [Self.fixtures + "/portal_client.py", "backend"])
            #expect(direct.stdout == "error org.freedesktop.DBus.Error.AccessDenied\n", "\(direct)")

            // A locked keychain hands out nothing until it is unlocked.
            let lock = """
                import secretstorage
                connection = secretstorage.dbus_init()
                secretstorage.get_default_collection(connection).lock()
                """
            #expect(try fixture.run(SecretServiceFixture.python, ["-c", lock]).status == 0)
            #expect(try Self.secret(fixture, of: app) == "response 2")
            #expect(try Self.sandboxed(fixture, as: app, lookup).stdout == "")
        }
    }

    @Test(
        "hostile callers of the backend: an app that hangs up before its secret is written, a malformed call and another user get nothing, and the daemon goes on serving",
        .enabled(if: geteuid() == 0, "needs root: the test creates a second user with useradd"))
    func hostileCallers() throws {
        try Self.withPortal(anyUserMayConnect: true) { fixture in
            let app = "org.example.App"
            let first = try Self.secret(fixture, of: app)
            #expect(first.count == 128, "\(first)")
            // The reader is gone before the backend writes: EPIPE for that call, not a SIGPIPE that
            // would end the daemon.
            let hungUp = try Self.sandboxed(
                fixture, as: app, ["/usr/bin/python3", "/fixtures/portal_client.py", "hangup"])
            #expect(hungUp.status == 0, "\(hungUp)")
            #expect(try Self.secret(fixture, of: app) == first, "still serving: \(fixture.daemonLogs())")

            let malformed = try fixture.run(
                SecretServiceFixture.python, [Self.fixtures + "/portal_client.py", "malformed"])
            #expect(malformed.stdout.hasPrefix("error org.freedesktop.DBus.Error.InvalidArgs"), "\(malformed)")

            let user = "tkpt" + String(UInt32.random(in: 0...UInt32.max), radix: 36)
            let add = try fixture.run("/usr/sbin/useradd", ["-M", "-N", "-s", "/usr/sbin/nologin", user])
            #expect(add.status == 0, "\(add)")
            defer { _ = try? fixture.run("/usr/sbin/userdel", [user]) }
            let stranger = try fixture.run(
                "/usr/sbin/runuser",
                [
                    "-u", user, "--", SecretServiceFixture.python, Self.fixtures + "/portal_client.py", "backend",
                    fixture.address,
                ])
            #expect(stranger.stdout == "error org.freedesktop.DBus.Error.AccessDenied\n", "\(stranger)")
            #expect(try Self.secret(fixture, of: app) == first)
        }
    }

    @Test(
        "move-to-portal: an app's Secret Service items move into its own keyring, merged with what it holds, found by libsecret in its sandbox and gone from the Secret Service; refused while the app runs and for a keyring sealed with another secret"
    )
    func moveIntoPortalKeyring() throws {
        try Self.withPortal { fixture in
            let app = "org.example.Mover"
            // The app already keeps one item of its own through the portal.
            let own = try Self.sandboxed(
                fixture, as: app, ["/usr/bin/secret-tool", "store", "--label", "own", "service", "own"], stdin: "own-1")
            #expect(own.status == 0, "\(own)")
            // And two it stored through the Secret Service, when its sandbox let it onto the bus.
            for (service, value) in [("api", "tok-1"), ("web", "tok-2")] {
                let stored = try fixture.secretTool(
                    ["store", "--label", "Mover \(service)", "application", app, "service", service], stdin: value)
                #expect(stored.status == 0, "\(stored)")
            }
            let unrelated = try fixture.secretTool(["store", "--label", "other", "service", "api"], stdin: "keep-me")
            #expect(unrelated.status == 0)
            let keyring = fixture.directory + "/home-\(app)/.local/share/keyrings/default.keyring"
            let move = [
                "secret-service", "move-to-portal", "--app-id", app, "--attribute", "application=\(app)",
                "--keyring-file", keyring, "--data-directory", fixture.dataDirectory,
            ]

            // While the app runs, its libsecret would write over the file: refused.
            let started = fixture.directory + "/home-\(app)/started"
            let running = Process()
            running.executableURL = URL(fileURLWithPath: "/usr/bin/bwrap")
            running.arguments =
                try Self.sandbox(fixture, as: app) + ["/bin/sh", "-c", "touch /home/app/started; exec sleep 600"]
            try running.run()
            defer {
                if running.isRunning { kill(running.processIdentifier, SIGKILL) }
                running.waitUntilExit()
            }
            let deadline = ContinuousClock.now + .seconds(60)
            while !FileManager.default.fileExists(atPath: started), ContinuousClock.now < deadline { usleep(20_000) }
            let refused = try fixture.run(SecretServiceFixture.tool, move)
            #expect(refused.status != 0 && refused.stderr.contains("is running"), "\(refused)")
            kill(running.processIdentifier, SIGKILL)
            running.waitUntilExit()
            #expect(try fixture.secretTool(["lookup", "application", app, "service", "api"]).stdout == "tok-1")

            // Another app's keyring (sealed with its secret) is not merged into: nothing moves.
            _ = try Self.sandboxed(
                fixture, as: "org.example.Other", ["/usr/bin/secret-tool", "store", "--label", "x", "k", "v"],
                stdin: "x")
            let otherKeyring = fixture.directory + "/home-org.example.Other/.local/share/keyrings/default.keyring"
            let wrong = try fixture.run(
                SecretServiceFixture.tool,
                Array(move.dropLast(4)) + ["--keyring-file", otherKeyring, "--data-directory", fixture.dataDirectory])
            #expect(wrong.status != 0 && wrong.stderr.contains("not sealed with this application"), "\(wrong)")
            #expect(try fixture.secretTool(["lookup", "application", app, "service", "web"]).stdout == "tok-2")

            let moved = try fixture.run(SecretServiceFixture.tool, move)
            #expect(moved.status == 0 && moved.stdout.hasPrefix("Moved 2 items"), "\(moved)")
            for (service, value) in [("api", "tok-1"), ("web", "tok-2"), ("own", "own-1")] {
                let found = try Self.sandboxed(
                    fixture, as: app, ["/usr/bin/secret-tool", "lookup", "service", service])
                #expect(found.stdout == value, "\(service): \(found)")
            }
            let file = try Data(contentsOf: URL(fileURLWithPath: keyring))
            #expect(file.range(of: Data("tok-1".utf8)) == nil && file.range(of: Data(app.utf8)) == nil)
            var status = stat()
            #expect(stat(keyring, &status) == 0 && status.st_mode & 0o777 == 0o600)
            #expect(try fixture.secretTool(["lookup", "application", app, "service", "api"]).stdout == "")
            #expect(try fixture.secretTool(["lookup", "service", "api"]).stdout == "keep-me")
            let again = try fixture.run(SecretServiceFixture.tool, move)
            #expect(again.status == 0 && again.stdout.hasPrefix("Moved 0 items"), "\(again)")
        }
    }
}

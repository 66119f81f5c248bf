import Foundation
import SystemCalls
import TPMKeychainTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

extension SecretServiceSuites {
    /// The daemon's own behaviour: the bus name, other users, hostile messages, many clients, a kill.
    @Suite
    struct DaemonTests {
        @Test("a second daemon refuses while the name is owned, saying --replace; with --replace it takes the name")
        func nameOwnership() throws {
            let fixture = try SecretServiceFixture()
            defer { fixture.stop() }
            let refused = try fixture.run(
                SecretServiceFixture.tool,
                ["secret-service", "--address", fixture.address, "--data-directory", fixture.dataDirectory])
            #expect(refused.status == 69, "\(refused)")
            #expect(refused.stderr.contains("--replace") && refused.stderr.contains("pid"), "\(refused)")

            let first = try #require(fixture.daemon)
            try fixture.startDaemon(extraArguments: ["--replace"])
            first.waitUntilExit()
            #expect(first.terminationStatus == 0)
            let store = try fixture.secretTool(
                ["store", "--label", "after", "service", "s", "account", "a"], stdin: "new")
            let lookup = try fixture.secretTool(["lookup", "service", "s", "account", "a"])
            #expect(store.status == 0 && lookup.stdout == "new", "the new daemon answers: \(store)\n\(lookup)")
        }

        @Test(
            "a caller of another uid gets AccessDenied, even on a bus that lets it connect",
            .enabled(if: geteuid() == 0, "needs root: the test creates a second user with useradd"))
        func otherUsersAreRefused() throws {
            let fixture = try SecretServiceFixture(anyUserMayConnect: true)
            defer { fixture.stop() }
            let store = try fixture.secretTool(
                ["store", "--label", "mine", "service", "s", "account", "a"], stdin: "mine")
            #expect(store.status == 0, "\(store)")
            let user = "tkss" + String(UInt32.random(in: 0...UInt32.max), radix: 36)
            let add = try fixture.run("/usr/sbin/useradd", ["-M", "-N", "-s", "/usr/sbin/nologin", user])
            #expect(add.status == 0, "\(add)")
            defer { _ = try? fixture.run("/usr/sbin/userdel", [user]) }
            // jeepney (python3-secretstorage's D-Bus library): dbus-send does not register on a bus
            // given by --address.
            let script = """
                import sys
                from jeepney import DBusAddress, new_method_call
                from jeepney.io.blocking import open_dbus_connection
                connection = open_dbus_connection(bus=sys.argv[1])
                base = '/org/freedesktop/secrets'
                calls = [
                    (base, 'org.freedesktop.DBus.Properties', 'GetAll', 's', ('org.freedesktop.Secret.Service',)),
                    (base, 'org.freedesktop.Secret.Service', 'SearchItems', 'a{ss}', ({'service': 's'},)),
                    (base, 'org.freedesktop.Secret.Service', 'OpenSession', 'sv', ('plain', ('s', ''))),
                    (base + '/collection/default', 'org.freedesktop.Secret.Collection', 'Delete', None, ()),
                ]
                for path, interface, member, signature, body in calls:
                    address = DBusAddress(path, bus_name='org.freedesktop.secrets', interface=interface)
                    reply = connection.send_and_get_reply(new_method_call(address, member, signature, body), timeout=30)
                    print(member, reply.header.fields.get(4, 'no error'), flush=True)
                """
            let run = try fixture.run(
                "/usr/sbin/runuser", ["-u", user, "--", SecretServiceFixture.python, "-c", script, fixture.address])
            let lines = run.stdout.split(separator: "\n")
            #expect(lines.count == 4, "\(run)")
            for line in lines {
                #expect(line.hasSuffix("org.freedesktop.DBus.Error.AccessDenied"), "\(run)")
            }
            let mine = try fixture.secretTool(["lookup", "service", "s", "account", "a"])
            #expect(mine.stdout == "mine", "the owner still reads: \(mine)")
        }

        @Test("malformed and hostile calls get error replies, and the daemon keeps answering", arguments: [1, 2, 3])
        func hostileMessages(seed: Int) throws {
            let fixture = try SecretServiceFixture()
            defer { fixture.stop() }
            // A default collection to aim at.
            _ = try fixture.secretTool(["store", "--label", "x", "service", "s", "account", "a"], stdin: "x")
            let run = try fixture.python("hostile_messages.py", [String(seed), "1500"])
            #expect(run.status == 0 && run.stdout.contains("alive"), "\(run)\n\(fixture.daemonLogs())")
            #expect(fixture.daemon?.isRunning == true)
        }

        @Test("50 clients storing at once lose nothing")
        func fiftyClients() throws {
            let fixture = try SecretServiceFixture()
            defer { fixture.stop() }
            // The default collection first, so that 50 first clients do not race to create it.
            _ = try fixture.secretTool(["store", "--label", "first", "service", "s", "account", "first"], stdin: "x")
            let results = Locked<[Int: ClientRun]>([:])
            DispatchQueue.concurrentPerform(iterations: 50) { number in
                let run = try? fixture.secretTool(
                    ["store", "--label", "client \(number)", "service", "many", "account", "user\(number)"],
                    stdin: "secret \(number)")
                results.withLock { $0[number] = run }
            }
            for number in 0..<50 {
                let stored = results.withLock { $0[number] }
                #expect(stored?.status == 0, "\(String(describing: stored))")
                let lookup = try fixture.secretTool(["lookup", "service", "many", "account", "user\(number)"])
                #expect(lookup.stdout == "secret \(number)", "\(lookup)")
            }
        }

        @Test("the daemon killed during CreateItem loses no acknowledged item, and starts again")
        func killedDuringCreateItem() throws {
            let fixture = try SecretServiceFixture()
            defer { fixture.stop() }
            _ = try fixture.secretTool(["store", "--label", "first", "service", "s", "account", "first"], stdin: "x")
            let output = fixture.directory + "/creator.out"
            let creator = try SecretServiceFixture.launch(
                SecretServiceFixture.python, [SecretServiceFixture.fixtures + "/create_items.py", "k", "100000"],
                environment: fixture.environment, output: output)
            // Observed progress: kill once the client has seen 30 acknowledgements.
            func acknowledged() -> [String] {
                ((try? String(contentsOfFile: output, encoding: .utf8)) ?? "").split(separator: "\n")
                    .filter { $0.hasPrefix("acked ") }.map { String($0.dropFirst(6)) }
            }
            while acknowledged().count < 30 && creator.isRunning { usleep(2_000) }
            fixture.stopDaemon(signal: SIGKILL)
            creator.waitUntilExit()
            let acked = acknowledged()
            #expect(acked.count >= 30, "\((try? String(contentsOfFile: output, encoding: .utf8)) ?? "")")
            try fixture.startDaemon()
            let check = try fixture.python("check_items.py", acked)
            #expect(check.stdout == "checked \(acked.count)\n", "\(check)")
        }

        @Test("an audit log that cannot be written (a full disk) does not stop reads; the daemon's log says so once")
        func unwritableAuditLog() throws {
            let fixture = try SecretServiceFixture(startDaemon: false)
            defer { fixture.stop() }
            let log = try fixture.startDaemon(extraArguments: ["--audit-log", "/dev/full"])
            for value in ["first", "second"] {
                let store = try fixture.secretTool(
                    ["store", "--label", "audited", "service", "audit", "account", value], stdin: value)
                #expect(store.status == 0, "\(store)")
                let lookup = try fixture.secretTool(["lookup", "service", "audit", "account", value])
                #expect(lookup.stdout == value, "\(lookup)\n\(fixture.daemonLogs())")
            }
            let said = ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").components(
                separatedBy: "could not be written to the audit log /dev/full")
            #expect(said.count == 2, "said once, not for each of four records: \(fixture.daemonLogs())")
        }
    }

    /// A collection's rules: the programs that may use its items.
    @Suite
    struct CollectionRuleTests {
        @Test(
            "a collection that names secret-tool as its one program refuses python with AccessDenied, and secret-tool uses it"
        )
        func allowedExecutables() throws {
            let fixture = try SecretServiceFixture()
            defer { fixture.stop() }
            let secretTool = try #require(
                (try? FileManager.default.destinationOfSymbolicLink(atPath: "/usr/bin/secret-tool")).map {
                    $0.hasPrefix("/") ? $0 : "/usr/bin/" + $0
                } ?? "/usr/bin/secret-tool")
            let path = try fixture.createCollection(
                label: "Tools only",
                properties: "'org.tpmkeychain.Collection.AllowedExecutables': ('as', ['\(secretTool)'])")
            let store = try fixture.secretTool(
                ["store", "--label", "tool token", "--collection", path, "service", "ruled", "account", "a"],
                stdin: "ruled value")
            #expect(store.status == 0, "\(store)\n\(fixture.daemonLogs())")
            let lookup = try fixture.secretTool(["lookup", "service", "ruled", "account", "a"])
            #expect(lookup.stdout == "ruled value", "\(lookup)")
            let read = """
                import secretstorage
                from jeepney import DBusAddress, new_method_call
                connection = secretstorage.dbus_init()
                session = secretstorage.util.open_session(connection)
                for item in secretstorage.search_items(connection, {'service': 'ruled'}):
                    address = DBusAddress(item.item_path, bus_name='org.freedesktop.secrets',
                                          interface='org.freedesktop.Secret.Item')
                    reply = connection.send_and_get_reply(new_method_call(address, 'GetSecret', 'o', (session.object_path,)))
                    print(reply.header.fields[4] if 4 in reply.header.fields else bytes(reply.body[0][2]).decode())
                """
            let python = try fixture.run(SecretServiceFixture.python, ["-c", read])
            #expect(python.stdout == "org.freedesktop.DBus.Error.AccessDenied\n", "\(python)")
        }
    }

    /// What D-Bus browsers (busctl tree, d-spy) walk: Introspect from the service down to the items.
    @Suite
    struct IntrospectionTests {
        @Test("Introspect names the children of every node, down to each item, and each object's interface")
        func introspectionTree() throws {
            let fixture = try SecretServiceFixture()
            defer { fixture.stop() }
            _ = try fixture.secretTool(["store", "--label", "x", "service", "tree", "account", "a"], stdin: "x")
            let script = """
                import xml.etree.ElementTree as ET
                from jeepney import DBusAddress, new_method_call
                from jeepney.io.blocking import open_dbus_connection
                connection = open_dbus_connection(bus='SESSION')
                def walk(path):
                    address = DBusAddress(path, bus_name='org.freedesktop.secrets',
                                          interface='org.freedesktop.DBus.Introspectable')
                    reply = connection.send_and_get_reply(new_method_call(address, 'Introspect'))
                    root = ET.fromstring(reply.body[0])
                    interfaces = [i.get('name') for i in root.findall('interface') if 'Secret' in i.get('name')]
                    print(path, ' '.join(interfaces))
                    for child in root.findall('node'):
                        if path.endswith('/session') or path.endswith('/prompt'):
                            continue
                        walk(path.rstrip('/') + '/' + child.get('name'))
                walk('/org/freedesktop/secrets')
                """
            let run = try fixture.run(SecretServiceFixture.python, ["-c", script])
            #expect(run.status == 0, "\(run)")
            let lines = run.stdout.split(separator: "\n").map(String.init)
            #expect(lines.contains("/org/freedesktop/secrets org.freedesktop.Secret.Service"), "\(run)")
            #expect(
                lines.contains("/org/freedesktop/secrets/collection/default org.freedesktop.Secret.Collection"),
                "\(run)")
            #expect(
                lines.contains("/org/freedesktop/secrets/aliases/default org.freedesktop.Secret.Collection"), "\(run)")
            #expect(
                lines.contains {
                    $0.hasPrefix("/org/freedesktop/secrets/collection/default/")
                        && $0.hasSuffix(" org.freedesktop.Secret.Item")
                },
                "\(run)")
        }
    }

    /// Confirm-each-access collections: every read asks the person (`--confirm-command`) first.
    @Suite
    struct ConfirmEachAccessTests {
        @Test("each secret-tool lookup in a confirm-each-access collection asks once; a refusal returns nothing")
        func eachReadIsConfirmed() throws {
            let fixture = try SecretServiceFixture(startDaemon: false)
            defer { fixture.stop() }
            let asked = fixture.directory + "/asked"
            let allow = fixture.directory + "/allow"
            let ownerAuthorization = fixture.directory + "/owner-authorization"
            // The TPM owner's password (empty here, as swtpm's is) is the daemon's, never the prompt's.
            try fixture.startDaemon(
                extraArguments: [
                    "--confirm-command",
                    "echo \"${TPM_KEYCHAIN_OWNER_AUTH-withheld}\" > \(ownerAuthorization); "
                        + "echo \"$TPM_KEYCHAIN_PROMPT_REASON\" >> \(asked); test -e \(allow)",
                ], environment: ["TPM_KEYCHAIN_OWNER_AUTH": ""])
            let path = try fixture.createCollection(
                label: "Ask me", properties: "'org.tpmkeychain.Collection.ConfirmEachAccess': ('b', True)")
            let store = try fixture.secretTool(
                ["store", "--label", "asked", "--collection", path, "service", "confirm", "account", "a"],
                stdin: "allowed")
            #expect(store.status == 0, "\(store)")
            func questions() -> [String] {
                ((try? String(contentsOfFile: asked, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
            }

            _ = FileManager.default.createFile(atPath: allow, contents: nil)
            let first = try fixture.secretTool(["lookup", "service", "confirm", "account", "a"])
            #expect(first.stdout == "allowed", "\(first)\n\(fixture.daemonLogs())")
            #expect(questions().count == 1, "\(questions())")
            #expect((try? String(contentsOfFile: ownerAuthorization, encoding: .utf8)) == "withheld\n")
            #expect(questions().first?.contains("secret-tool") == true && questions().first?.contains("Ask me") == true)
            // The person sees where the caller comes from, as the kernel says: the chain and the file's hash.
            #expect(
                questions().first?.contains(#/via "[^"]* → secret-tool", [^)]*sha256 [0-9a-f]{16}\)/#) == true,
                "\(questions())")
            let second = try fixture.secretTool(["lookup", "service", "confirm", "account", "a"])
            #expect(second.stdout == "allowed", "\(second)")
            #expect(questions().count == 2, "each read asks again: \(questions())")

            try FileManager.default.removeItem(atPath: allow)
            let refused = try fixture.secretTool(["lookup", "service", "confirm", "account", "a"])
            #expect(refused.stdout.isEmpty && refused.status != 0, "\(refused)")
            #expect(questions().count == 3, "\(questions())")
            // The question names the item the Unlock named.
            #expect(
                questions().first?.contains("to read \"asked\" of the keyring \"Ask me\"?") == true, "\(questions())")

            // A yes covers the items the Unlock named, not the others of the collection.
            let other = try fixture.secretTool(
                ["store", "--label", "other", "--collection", path, "service", "confirm", "account", "b"],
                stdin: "not asked for")
            #expect(other.status == 0, "\(other)")
            _ = FileManager.default.createFile(atPath: allow, contents: nil)
            let script = """
                import secretstorage
                connection = secretstorage.dbus_init()
                items = {i.get_label(): i for i in secretstorage.search_items(connection, {'service': 'confirm'})}
                asked, other = items['asked'], items['other']
                print('dismissed' if asked.unlock() else 'unlocked', asked.is_locked(), other.is_locked())
                print(asked.get_secret().decode())
                try:
                    print(other.get_secret().decode())
                except secretstorage.exceptions.LockedException:
                    print('other is locked')
                """
            let bound = try fixture.run(SecretServiceFixture.python, ["-c", script])
            #expect(bound.stdout == "unlocked False True\nallowed\nother is locked\n", "\(bound)")
            #expect(questions().last?.contains("to read \"asked\" of the keyring") == true, "\(questions())")
        }
    }
}

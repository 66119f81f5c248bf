import Foundation
import TPMKeychainTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

extension SecretServiceSuites {
    /// Every method of every interface, called as a caller the collection's rules refuse and while
    /// the collection is locked (Fixtures/secret-service/every_method.py, which fails when the
    /// daemon declares a method it has no row for): each gets the specification's error, and
    /// nothing changes.
    @Suite
    struct DecisionTests {
        /// What each row answers a caller the collection's rules do not name. Metadata (labels,
        /// attributes, paths) stays visible to every program of the user, as documented.
        static let refused: [String: String] = [
            "item GetSecret": accessDenied, "item GetSecret by alias": accessDenied, "item SetSecret": accessDenied,
            "item Delete": accessDenied, "item Set Label": accessDenied, "item Set Attributes": accessDenied,
            "item Get Label": "ok", "item GetAll": "ok", "item Introspect": "ok",
            "collection CreateItem": accessDenied, "collection SearchItems": "ok", "collection Delete": accessDenied,
            "collection Set Label": accessDenied, "collection GetAll": "ok", "service SearchItems": "ok",
            "service GetSecrets": accessDenied, "service Lock": accessDenied, "service Unlock": accessDenied,
            "service ReadAlias": "ok", "service SetAlias default away": accessDenied,
            "service SetAlias default to none": accessDenied, "service SetAlias new to it": accessDenied,
            "service OpenSession": "ok", "service CreateCollection": "ok", "session Close": "ok",
        ]

        /// What each row answers an allowed caller while the collection is locked (Unlock, the way
        /// out, is not called).
        static let locked: [String: String] = [
            "item GetSecret": isLocked, "item GetSecret by alias": isLocked, "item SetSecret": isLocked,
            "item Delete": isLocked, "item Set Label": isLocked, "item Set Attributes": isLocked,
            "item Get Label": "ok", "item GetAll": "ok", "item Introspect": "ok",
            "collection CreateItem": isLocked, "collection SearchItems": "ok", "collection Delete": isLocked,
            "collection Set Label": isLocked, "collection GetAll": "ok", "service SearchItems": "ok",
            "service GetSecrets": "ok empty", "service Lock": "ok", "service ReadAlias": "ok",
            "service SetAlias default away": isLocked, "service SetAlias default to none": isLocked,
            "service SetAlias new to it": isLocked, "service OpenSession": "ok", "service CreateCollection": "ok",
            "session Close": "ok",
        ]
        static let accessDenied = "org.freedesktop.DBus.Error.AccessDenied"
        static let isLocked = "org.freedesktop.Secret.Error.IsLocked"

        /// Makes an item in `collection`, points "default" at it, and reads back what the test
        /// later checks is unchanged; run by `python`.
        static let setUp = """
            import sys, secretstorage
            from jeepney import DBusAddress, new_method_call
            connection = secretstorage.dbus_init()
            collection = secretstorage.Collection(connection, sys.argv[1])
            service = DBusAddress('/org/freedesktop/secrets', bus_name='org.freedesktop.secrets',
                                  interface='org.freedesktop.Secret.Service')
            if sys.argv[2] == 'create':
                collection.create_item('kept', {'service': 'decision'}, b'kept secret')
                connection.send_and_get_reply(new_method_call(service, 'SetAlias', 'so', ('default', sys.argv[1])))
            if sys.argv[2] == 'unlock':
                collection.unlock()
            items = list(collection.get_all_items())
            default = connection.send_and_get_reply(new_method_call(service, 'ReadAlias', 's', ('default',))).body[0]
            print(collection.get_label(), collection.is_locked(), default == sys.argv[1])
            for item in items:
                print(item.item_path, item.get_label(), sorted(item.get_attributes().items()), item.get_secret())
            """

        /// The daemon's answers, row by row, from every_method.py run by `python`.
        static func answers(
            _ fixture: SecretServiceFixture, python: String, mode: String, collection: String, item: String,
            other: String
        ) throws -> [String: String] {
            let run = try fixture.run(
                python, [SecretServiceFixture.fixtures + "/every_method.py", mode, collection, item, other])
            #expect(run.status == 0, "\(run)\n\(fixture.daemonLogs())")
            var answers: [String: String] = [:]
            for line in run.stdout.split(separator: "\n") {
                guard let colon = line.firstIndex(of: ":") else { continue }
                answers[String(line[..<colon])] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            }
            return answers
        }

        /// The state setUp prints: the collection's label, lock and alias, then each item.
        static func state(
            _ fixture: SecretServiceFixture, python: String, collection: String, step: String
        ) throws -> String {
            let run = try fixture.run(python, ["-c", setUp, collection, step])
            #expect(run.status == 0, "\(run)\n\(fixture.daemonLogs())")
            return run.stdout
        }

        @Test(
            "as a program the collection's rules do not name: every read of a secret, write, delete, lock, unlock and re-pointing of an alias is AccessDenied, and nothing changes"
        )
        func refusedCaller() throws {
            let fixture = try SecretServiceFixture()
            defer { fixture.stop() }
            // The allowed program: a copy of the interpreter at a path of its own, so that the
            // same scripts run as /usr/bin/python3 are another executable.
            let allowed = fixture.directory + "/allowed-python"
            let interpreter = URL(fileURLWithPath: SecretServiceFixture.python).resolvingSymlinksInPath().path
            try FileManager.default.copyItem(atPath: interpreter, toPath: allowed)
            let collection = try fixture.createCollection(
                label: "Ruled", properties: "'org.tpmkeychain.Collection.AllowedExecutables': ('as', ['\(allowed)'])")
            let other = try fixture.createCollection(label: "Other", properties: "")
            let before = try Self.state(fixture, python: allowed, collection: collection, step: "create")
            #expect(before.hasPrefix("Ruled False True\n") && before.contains("kept secret"), "\(before)")
            let item = try #require(before.split(separator: "\n").dropFirst().first?.split(separator: " ").first)

            let answers = try Self.answers(
                fixture, python: SecretServiceFixture.python, mode: "refused", collection: collection,
                item: String(item), other: other)
            #expect(answers == Self.refused, "\(answers)")

            let after = try Self.state(fixture, python: allowed, collection: collection, step: "read")
            #expect(after == before, "\(after)")
        }

        @Test(
            "while the collection is locked: every read of a secret, write, delete and re-pointing of an alias is IsLocked (GetSecrets leaves the item out), and nothing changes"
        )
        func lockedCollection() throws {
            let fixture = try SecretServiceFixture()
            defer { fixture.stop() }
            let python = SecretServiceFixture.python
            let collection = try fixture.createCollection(label: "Lockable", properties: "")
            let other = try fixture.createCollection(label: "Other", properties: "")
            let before = try Self.state(fixture, python: python, collection: collection, step: "create")
            #expect(before.hasPrefix("Lockable False True\n") && before.contains("kept secret"), "\(before)")
            let item = try #require(before.split(separator: "\n").dropFirst().first?.split(separator: " ").first)
            let lock = try fixture.run(
                python,
                [
                    "-c",
                    "import sys, secretstorage; secretstorage.Collection(secretstorage.dbus_init(), sys.argv[1]).lock()",
                    collection,
                ])
            #expect(lock.status == 0, "\(lock)")

            let answers = try Self.answers(
                fixture, python: python, mode: "locked", collection: collection, item: String(item), other: other)
            #expect(answers == Self.locked, "\(answers)")

            let after = try Self.state(fixture, python: python, collection: collection, step: "unlock")
            #expect(after == before, "\(after)")
        }
    }

    /// Arguments of the right D-Bus signature and the wrong meaning, and more sessions than a
    /// connection may hold (Fixtures/secret-service/bad_arguments.py).
    @Suite
    struct BadArgumentTests {
        static let expected = """
            CreateItem label not a string: org.freedesktop.DBus.Error.InvalidArgs
            CreateItem attributes not a{ss}: org.freedesktop.DBus.Error.InvalidArgs
            CreateItem well formed: ok
            Set item Label not a string: org.freedesktop.DBus.Error.InvalidArgs
            Set item Attributes not a{ss}: org.freedesktop.DBus.Error.InvalidArgs
            Set collection Label not a string: org.freedesktop.DBus.Error.InvalidArgs
            CreateCollection label not a string: org.freedesktop.DBus.Error.InvalidArgs
            CreateCollection ConfirmEachAccess not a boolean: org.freedesktop.DBus.Error.InvalidArgs
            GetAll of a collection that does not exist: org.freedesktop.Secret.Error.NoSuchObject
            GetAll of an item that does not exist: org.freedesktop.Secret.Error.NoSuchObject
            GetAll of a session that does not exist: org.freedesktop.Secret.Error.NoSession
            GetAll of a prompt that does not exist: org.freedesktop.Secret.Error.NoSuchObject
            GetAll of this connection's session: ok
            DH public 0: org.freedesktop.DBus.Error.InvalidArgs
            DH public 1: org.freedesktop.DBus.Error.InvalidArgs
            DH public p-1: org.freedesktop.DBus.Error.InvalidArgs
            DH public p: org.freedesktop.DBus.Error.InvalidArgs
            DH public p+1: org.freedesktop.DBus.Error.InvalidArgs
            DH public 2: ok
            DH public p-2: ok
            DH public 2 in 129 bytes: org.freedesktop.DBus.Error.InvalidArgs
            sessions opened: 61, then: ['org.freedesktop.DBus.Error.LimitsExceeded']
            collections: default session

            """

        @Test(
            "a label or flag of the wrong type, GetAll of an object that does not exist, a Diffie-Hellman value out of range or over 128 bytes, and a 65th session get the specification's errors; no collection is made by a refused call"
        )
        func badArguments() throws {
            let fixture = try SecretServiceFixture()
            defer { fixture.stop() }
            let run = try fixture.python("bad_arguments.py")
            #expect(run.status == 0 && run.stdout == Self.expected, "\(run)\n\(fixture.daemonLogs())")
        }
    }

    /// README's rule for the daemon: a simulated TPM only when asked for, and then said.
    @Suite
    struct SimulatedTPMTests {
        /// The `org.tpmkeychain.Collection.TPM` property of the default collection, or the error.
        static let readTPM = """
            from jeepney import DBusAddress, HeaderFields, MessageType, new_method_call
            from jeepney.io.blocking import open_dbus_connection
            connection = open_dbus_connection(bus='SESSION')
            address = DBusAddress('/org/freedesktop/secrets', bus_name='org.freedesktop.secrets',
                                  interface='org.freedesktop.Secret.Service')
            reply = connection.send_and_get_reply(new_method_call(
                address, 'CreateCollection', 'a{sv}s', ({'org.freedesktop.Secret.Collection.Label': ('s', 'Mine')}, '')))
            if reply.header.message_type == MessageType.error:
                print(reply.header.fields[HeaderFields.error_name], reply.body[0])
            else:
                collection = DBusAddress(reply.body[0], bus_name='org.freedesktop.secrets',
                                         interface='org.freedesktop.DBus.Properties')
                print(connection.send_and_get_reply(new_method_call(
                    collection, 'Get', 'ss', ('org.tpmkeychain.Collection', 'TPM'))).body[0][1])
            """

        @Test(
            "with no TPM usable, the daemon creates no collection on a simulated TPM unless started with --allow-simulated, says what to do, and reports such a collection as SIMULATED",
            .enabled(if: access("/dev/tpmrm0", R_OK | W_OK) != 0, "a TPM is usable here"))
        func simulatedOnlyWhenAllowed() throws {
            let fixture = try SecretServiceFixture(startDaemon: false)
            defer { fixture.stop() }
            let refusingLog = try fixture.startDaemon(withoutTCTI: true)
            let refused = try fixture.run(SecretServiceFixture.python, ["-c", Self.readTPM])
            #expect(
                refused.stdout.hasPrefix("org.freedesktop.DBus.Error.Failed")
                    && refused.stdout.contains("--allow-simulated"),
                "\(refused)")
            let warnings = (try? String(contentsOfFile: refusingLog, encoding: .utf8)) ?? ""
            #expect(warnings.contains("the default collection could not be created"), "\(warnings)")
            #expect(KeychainLocationFiles.stores(in: fixture.dataDirectory).isEmpty)
            fixture.stopDaemon()

            let allowingLog = try fixture.startDaemon(extraArguments: ["--allow-simulated"], withoutTCTI: true)
            let allowed = try fixture.run(SecretServiceFixture.python, ["-c", Self.readTPM])
            #expect(allowed.status == 0 && allowed.stdout.hasPrefix("SIMULATED: "), "\(allowed)")
            fixture.stopDaemon()
            // The next start says so, for the collections made on it.
            let log = try fixture.startDaemon(extraArguments: ["--allow-simulated"], withoutTCTI: true)
            let said = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            #expect(said.contains("is sealed to a simulated TPM: SIMULATED"), "\(said)\n\(allowingLog)")
        }
    }

    /// The store directories (each with a store.meta) under a data directory.
    enum KeychainLocationFiles {
        static func stores(in directory: String) -> [String] {
            ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).filter {
                FileManager.default.fileExists(atPath: directory + "/" + $0 + "/store.meta")
            }
        }
    }
}

import Foundation
import TPMKeychainTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

extension SecretServiceSuites {
    /// The daemon as desktop programs use it: Debian's secret-tool (libsecret), python3-secretstorage
    /// and python3-keyring, each a real client process on a private bus, against stores on a private
    /// swtpm. Serialized: each test starts its own bus, TPM and daemon, and two cores are enough for one.
    @Suite
    struct RealClientTests {
        @Test("secret-tool stores, looks up, searches and clears (libsecret, a DH session first)")
        func secretTool() throws {
            let fixture = try SecretServiceFixture()
            defer { fixture.stop() }
            let run = try fixture.run("/bin/bash", [SecretServiceFixture.fixtures + "/secret_tool_check.sh"])
            #expect(run.status == 0 && run.stdout.contains("ok secret-tool"), "\(run)\n\(fixture.daemonLogs())")
        }

        @Test(
            "python3-secretstorage: collections, aliases, both session algorithms, locking, properties, errors",
            arguments: ["collections", "aliases", "dh", "plain", "locking", "properties", "errors"])
        func secretStorage(scenario: String) throws {
            let fixture = try SecretServiceFixture()
            defer { fixture.stop() }
            let run = try fixture.python("secretstorage_client.py", [scenario])
            #expect(run.status == 0 && run.stdout.contains("ok \(scenario)"), "\(run)\n\(fixture.daemonLogs())")
        }

        @Test(
            "libsecret's own library: a client holding the default collection survives its asynchronous store after create_sync (it died of SIGSEGV on an invalidated Items), and sees another app's item come and go",
            arguments: ["crash", "watch"])
        func libsecretClient(scenario: String) throws {
            let fixture = try SecretServiceFixture()
            defer { fixture.stop() }
            let run = try fixture.python("libsecret_client.py", [scenario])
            #expect(run.status == 0 && run.stdout.contains("ok \(scenario)"), "\(run)\n\(fixture.daemonLogs())")
        }

        @Test("python3-keyring's SecretService backend sets, gets and deletes")
        func pythonKeyring() throws {
            let fixture = try SecretServiceFixture()
            defer { fixture.stop() }
            let run = try fixture.python("keyring_client.py")
            #expect(run.status == 0 && run.stdout.contains("ok keyring"), "\(run)\n\(fixture.daemonLogs())")
        }

        @Test(
            "an item stored with secret-tool is the CLI's generic password, and the CLI's items are found by secret-tool"
        )
        func keychainItemsAreSecretServiceItems() throws {
            let fixture = try SecretServiceFixture()
            defer { fixture.stop() }
            let store = try fixture.secretTool(
                ["store", "--label", "Mail", "service", "mail.example", "account", "ana"], stdin: "from secret-tool")
            #expect(store.status == 0, "\(store)")
            let keychain = fixture.dataDirectory + "/default"
            let find = try fixture.run(
                SecretServiceFixture.tool,
                ["find-generic-password", "-s", "mail.example", "-a", "ana", "-w", "--keychain", keychain])
            #expect(find.status == 0 && find.stdout == "from secret-tool\n", "\(find)")

            let add = try fixture.run(
                SecretServiceFixture.tool,
                [
                    "add-generic-password", "-s", "cli.example", "-a", "bo", "-l", "From the CLI", "--keychain",
                    keychain,
                ],
                stdin: "from the CLI\n")
            #expect(add.status == 0, "\(add)")
            let lookup = try fixture.secretTool(["lookup", "service", "cli.example", "account", "bo"])
            #expect(lookup.status == 0 && lookup.stdout == "from the CLI", "\(lookup)\n\(fixture.daemonLogs())")
            let search = try fixture.secretTool(["search", "--all", "service", "cli.example"])
            #expect(search.stdout.contains("label = From the CLI"), "\(search)")
        }

        @Test("no secret, label, attribute name or value is on disk in clear")
        func nothingInClearOnDisk() throws {
            let fixture = try SecretServiceFixture()
            defer { fixture.stop() }
            let secret = "Secret-\(UUID().uuidString)"
            let label = "Label-\(UUID().uuidString)"
            let name = "attr-\(UUID().uuidString.prefix(8))"
            let value = "value-\(UUID().uuidString)"
            let store = try fixture.secretTool(
                ["store", "--label", label, name, value, "service", "s-\(value)"], stdin: secret)
            #expect(store.status == 0, "\(store)")
            let lookup = try fixture.secretTool(["lookup", name, value])
            #expect(lookup.stdout == secret, "\(lookup)")
            var files: [String] = []
            let enumerator = FileManager.default.enumerator(atPath: fixture.dataDirectory)
            while let path = enumerator?.nextObject() as? String { files.append(fixture.dataDirectory + "/" + path) }
            var scanned = 0
            for file in files {
                guard let bytes = FileManager.default.contents(atPath: file) else { continue }
                scanned += 1
                for needle in [secret, label, name, value] {
                    #expect(bytes.range(of: Data(needle.utf8)) == nil, "\(needle) in clear in \(file)")
                }
            }
            #expect(scanned > 3)
        }
    }
}

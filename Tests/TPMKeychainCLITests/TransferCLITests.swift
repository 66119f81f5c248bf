import Foundation
import KeychainVocabulary
import TPMKeychain
import TPMKeychainTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `export`, `import` and `device-key` as a user runs them, each store on its own swtpm.
@Suite("export and import")
struct TransferCLITests {
    static let passphrase = "correct horse battery staple\n"

    @Test(
        "export --passphrase then import on another TPM: the items that may leave arrive, the rest are counted, a wrong passphrase exits 77"
    )
    func passphraseArchive() throws {
        let source = try CLIFixture()
        try source.succeed("add-generic-password", "-s", "mail", "-a", "alice", "-w", "hunter2", "-l", "Mail")
        try source.succeed("add-internet-password", "-s", "git.example.com", "-a", "bob", "-r", "htps", "-w", "tok3n")
        try source.succeed(
            "add-generic-password", "-s", "mail", "-a", "local", "-w", "stays", "--accessible",
            "whenUnlockedThisDeviceOnly")
        let archive = source.directory + "/backup.tkar"
        let exported = try source.run(
            "export", "--output", archive, "--passphrase-fd", "0", "--scrypt-log2n", "10", "--list-skipped",
            stdin: Data(Self.passphrase.utf8))
        #expect(exported.status == 0, "\(exported)")
        #expect(exported.stdout.hasPrefix("exported 2 items to \(archive)\n"), "\(exported)")
        #expect(exported.stdout.contains("left on this device: 1 items (1 because its class is ThisDeviceOnly)"))
        #expect(exported.stdout.contains("generic password \"mail\" / \"local\""), "\(exported)")
        let again = try source.run(
            "export", "--output", archive, "--passphrase-fd", "0", stdin: Data(Self.passphrase.utf8))
        #expect(again.status == 64 && again.stderr.contains("never overwrites"), "\(again)")
        let short = try source.run(
            "export", "--output", source.directory + "/short.tkar", "--passphrase-fd", "0", stdin: Data("short\n".utf8))
        #expect(short.status == 64 && !FileManager.default.fileExists(atPath: source.directory + "/short.tkar"))

        let target = try CLIFixture()
        let wrong = try target.run("import", archive, "--passphrase-fd", "0", stdin: Data("not the passphrase\n".utf8))
        #expect(wrong.status == 77, "\(wrong)")
        let dryRun = try target.run(
            "import", archive, "--dry-run", "--passphrase-fd", "0", stdin: Data(Self.passphrase.utf8))
        #expect(dryRun.status == 0, "\(dryRun)")
        #expect(dryRun.stdout.contains("add: generic password \"mail\" / \"alice\""), "\(dryRun)")
        #expect(dryRun.stdout.contains("dry run: 2 items would be written"), "\(dryRun)")
        let missing = try target.run("find-generic-password", "-s", "mail", "-a", "alice", "-w")
        #expect(missing.status == 44, "the dry run wrote: \(missing)")

        let imported = try target.run("import", archive, "--passphrase-fd", "0", stdin: Data(Self.passphrase.utf8))
        #expect(
            imported.stdout == "imported: 2 added, 0 replaced, 0 kept beside an existing item, 0 skipped\n",
            "\(imported)")
        #expect(try target.succeed("find-generic-password", "-s", "mail", "-a", "alice", "-w").stdout == "hunter2\n")
        #expect(
            try target.succeed("find-internet-password", "-s", "git.example.com", "-a", "bob", "-r", "htps", "-w")
                .stdout
                == "tok3n\n")
        let second = try target.run(
            "import", archive, "--conflicts", "keep-both", "--passphrase-fd", "0", stdin: Data(Self.passphrase.utf8))
        #expect(second.stdout.hasPrefix("imported: 0 added, 0 replaced, 2 kept beside"), "\(second)")
        #expect(
            try target.succeed("find-generic-password", "-s", "mail", "-a", "alice (imported)", "-w").stdout
                == "hunter2\n")
    }

    @Test(
        "device-key prints the target's import key; an archive for it imports there and is refused (65) on another machine's TPM"
    )
    func deviceKeyArchive() throws {
        let source = try CLIFixture()
        try source.succeed("add-generic-password", "-s", "svc", "-a", "acct", "-w", "moved")
        let target = try CLIFixture()
        let printed = try target.succeed("device-key")
        let key = printed.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(key.hasPrefix("tkdk1:") && printed.stderr.contains("fingerprint: SHA256:"), "\(printed)")
        #expect(try target.succeed("device-key").stdout == printed.stdout, "the key is made once")
        let keyFile = source.directory + "/target.key"
        try Data(printed.stdout.utf8).write(to: URL(fileURLWithPath: keyFile))

        let archive = source.directory + "/for-target.tkar"
        try source.succeed("export", "--output", archive, "--to", keyFile)
        let other = try CLIFixture()
        try other.succeed("device-key")
        let refused = try other.run("import", archive)
        #expect(refused.status == 65 && refused.stderr.contains("device import key"), "\(refused)")
        let imported = try target.run("import", archive)
        #expect(imported.status == 0, "\(imported)")
        #expect(try target.succeed("find-generic-password", "-s", "svc", "-a", "acct", "-w").stdout == "moved\n")
        let badKey = try source.run("export", "--output", source.directory + "/x.tkar", "--to", "tkdk1:AAAA")
        #expect(badKey.status == 64, "\(badKey)")
    }

    @Test(
        "an import killed with SIGKILL leaves a whole prefix of the archive, each item complete; running it again finishes the rest"
    )
    func killedImport() async throws {
        // The archive is made in this process: thousands of CLI runs would take minutes.
        let source = try CLIFixture()
        var location = try KeychainLocation(path: source.store, tcti: source.simulator.tcti)
        location.deviceDirectory = source.directory + "/device"
        let count = 3000
        let name = { (index: Int) in "item-" + String(String(index + 100_000).dropFirst()) }
        do {
            let keychain = try Keychain(service: "bulk", location: location)
            for index in 0..<count { try keychain.set("value of \(name(index))", forKey: name(index)) }
            let archive = source.directory + "/bulk.tkar"
            let passphrase = "a passphrase for the bulk archive"
            _ = try await KeychainArchive.export(
                from: location, to: archive,
                protection: .passphrase(passphrase, cost: .init(log2N: 10, blockSize: 8, parallelism: 1)))
            Keychain.closeStore(location)

            let target = try CLIFixture()
            let running = try CLI.start(
                ["import", "--keychain", target.store, archive, "--passphrase-fd", "0"],
                environment: target.environment,
                stdinPipe: true)
            try running.write(Data((passphrase + "\n").utf8), closing: true)
            // Killed once items are arriving: observed progress, not a time.
            var written = 0
            while running.process.isRunning, written < 20 {
                written = itemFiles(target.store)
                usleep(1_000)
            }
            kill(running.processIdentifier, SIGKILL)
            let killed = try running.finish()
            #expect(
                killed.killedBySignal && killed.status == SIGKILL, "the import ended before it was killed: \(killed)")

            var targetLocation = try KeychainLocation(path: target.store, tcti: target.simulator.tcti)
            targetLocation.deviceDirectory = target.directory + "/device"
            let keys = try Keychain(service: "bulk", location: targetLocation).allKeys().sorted()
            Keychain.closeStore(targetLocation)
            #expect(keys.count > 0 && keys.count < count, "\(keys.count) of \(count)")
            // The archive's order, read by the second reader (Fixtures/archives/read-archive.py).
            let order = try archiveAccounts(archive, passphrase: passphrase)
            #expect(order.count == count)
            #expect(keys == order.prefix(keys.count).sorted(), "not a prefix of the archive")
            let checked = try Keychain(service: "bulk", location: targetLocation)
            for key in keys { #expect(try checked.string(forKey: key) == "value of \(key)") }
            Keychain.closeStore(targetLocation)

            let resumed = try target.run(
                "import", archive, "--passphrase-fd", "0", stdin: Data((passphrase + "\n").utf8))
            #expect(
                resumed.stdout.hasPrefix(
                    "imported: \(count - keys.count) added, 0 replaced, 0 kept beside an existing item, \(keys.count) skipped"
                ),
                "\(resumed)")
        }
    }

    @Test("a CSV export and a pass store import through the same command; the sources are unchanged")
    func foreignSources() throws {
        let fixture = try CLIFixture()
        let csv = fixture.directory + "/passwords.csv"
        let text =
            "name,url,username,password,note\nGitHub,https://github.com/login,octo,gh-secret,\nRouter,,admin,r0uter,\n"
        try Data(text.utf8).write(to: URL(fileURLWithPath: csv))
        // Limited to an access group its items are not in: nothing is written, each is listed.
        let limited = try fixture.run("import", csv, "--access-group", "com.example.app")
        #expect(
            limited.stdout.hasPrefix("imported: 0 added, 0 replaced, 0 kept beside an existing item, 2 skipped\n")
                && limited.stdout.contains("its access group is not one this import was allowed to write"),
            "\(limited)")
        let imported = try fixture.run("import", csv)
        #expect(
            imported.stdout == "imported: 2 added, 0 replaced, 0 kept beside an existing item, 0 skipped\n",
            "\(imported)")
        #expect(
            try fixture.succeed(
                "find-internet-password", "-s", "github.com", "-a", "octo", "-r", "htps", "-p", "/login", "-w"
            )
            .stdout == "gh-secret\n")
        #expect(try fixture.succeed("find-generic-password", "-s", "Router", "-a", "admin", "-w").stdout == "r0uter\n")
        #expect(try String(contentsOfFile: csv, encoding: .utf8) == text)

        let gpg = "/usr/bin/gpg"
        try #require(FileManager.default.isExecutableFile(atPath: gpg), "gpg is missing: install gnupg")
        let home = try makeGnuPGHome()
        defer {
            _ = try? SystemTool.output("/usr/bin/gpgconf", ["--kill", "all"], environment: ["GNUPGHOME": home])
            try? FileManager.default.removeItem(atPath: home)
        }
        _ = try SystemTool.output(
            gpg,
            [
                "--batch", "--passphrase", "", "--quick-gen-key", "Test <test@example.invalid>", "default", "default",
                "never",
            ],
            environment: ["GNUPGHOME": home])
        let store = fixture.directory + "/password-store"
        try FileManager.default.createDirectory(atPath: store + "/web", withIntermediateDirectories: true)
        try Data("test@example.invalid\n".utf8).write(to: URL(fileURLWithPath: store + "/.gpg-id"))
        _ = try SystemTool.output(
            gpg,
            [
                "--batch", "--yes", "--trust-model", "always", "-r", "test@example.invalid", "-o",
                store + "/web/shop.gpg", "-e",
            ],
            environment: ["GNUPGHOME": home], input: Data("pass-secret\nlogin: carol\n".utf8))
        var environment = fixture.environment
        environment["GNUPGHOME"] = home
        let fromPass = try CLI.run(["import", "--keychain", fixture.store, store], environment: environment)
        #expect(fromPass.stdout.hasPrefix("imported: 1 added"), "\(fromPass)")
        #expect(
            try fixture.succeed("find-generic-password", "-s", "web/shop", "-a", "carol", "-w").stdout
                == "pass-secret\nlogin: carol\n")
    }
}

/// The accounts of a passphrase archive's items, in the archive's order.
private func archiveAccounts(_ archive: String, passphrase: String) throws -> [String] {
    struct Read: Decodable {
        struct Item: Decodable { let attributes: [String: String] }
        let items: [Item]
    }
    let reader = ProjectFixtures.directory.appendingPathComponent("archives/read-archive.py").path
    let output = try SystemTool.output("/usr/bin/python3", [reader, archive], input: Data((passphrase + "\n").utf8))
    return try JSONDecoder().decode(Read.self, from: output).items.map { item in
        let hex = Array((item.attributes["acct"] ?? "").utf8)
        let bytes = stride(from: 0, to: hex.count - 1, by: 2).compactMap {
            UInt8(String(decoding: hex[$0...$0 + 1], as: UTF8.self), radix: 16)
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// Item files under a store, counted without opening it.
private func itemFiles(_ store: String) -> Int {
    guard let enumerator = FileManager.default.enumerator(atPath: store) else { return 0 }
    return enumerator.compactMap { $0 as? String }.filter { $0.hasSuffix(".item") }.count
}

import Foundation
import TPMKeychainTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Every reading, writing and deleting operation of every face, called as another local user and
/// while the keychain is locked, from one table: the Keychain API, SecItem and KeychainStorage
/// through tpm-keychain-face-probe (a process of their own, so a real second user can run them),
/// the CLI's verbs and the git helper's actions. The table must have a row for each operation the
/// probe knows, each verb `tpm-keychain --help` lists and each action the git helper's usage
/// names, so a new one fails here until its row says what it meets. The Secret Service's methods
/// have their own table, driven by the daemon's Introspect (SecretServiceTests' DecisionTests).
@Suite("every face's operations, as another user and while locked", .serialized)
struct EveryFaceDecisionTests {
    enum Face: String, CaseIterable {
        case keychain, secItem, keychainStorage, cli, gitHelper
    }

    /// What an operation meets in one scenario.
    enum Expectation: Equatable {
        /// Refused, nothing changed.
        case refused
        /// Done, and why that is right; `saying`: what its output must contain.
        case allowed(why: String, saying: String? = nil)
        /// Not called in this scenario, and why.
        case notCalled(why: String)
    }

    struct Row {
        let face: Face
        /// The probe's operation, the CLI verb (`key sign` for a key verb), or the git action.
        let operation: String
        /// For the CLI: the arguments after `--keychain <store>`; for the git helper: its input.
        var arguments: [String] = []
        /// For the CLI: whether the verb takes `--keychain` (delete-keychain names its store itself).
        var keychainOption = true
        let otherUser: Expectation
        let whileLocked: Expectation
    }

    static let service = "face"
    static let lockBound = "bound to the lock"
    static let credential = "protocol=https\nhost=git.example\nusername=ada\npassword=from git\n\n"

    // Why some operations are not refused while locked.
    static let metadata = "attributes are under the master key, not bound to the lock (SECURITY.md)"
    static let adding = "adding while locked works, as on iOS"
    static let notLockBound =
        "KeychainStorage's items have no accessibility class (SAP's API has none): under the master key"
    static let internetNotLockBound = "add-internet-password has no --accessible: its items are under the master key"
    // Why some operations are not called.
    static let ownDevice =
        "acts on the caller's own device (passcode, lock state), not on the owner's: OtherUsersTests"
    static let noStore = "works on no store of another user"
    static let lockItself = "sets or reads the lock itself"

    static func probe(_ face: Face, _ operation: String, _ locked: Expectation) -> Row {
        Row(face: face, operation: operation, otherUser: .refused, whileLocked: locked)
    }

    static func cli(
        _ verb: String, _ arguments: [String] = [], keychainOption: Bool = true, otherUser: Expectation = .refused,
        locked: Expectation
    ) -> Row {
        Row(
            face: .cli, operation: verb, arguments: arguments, keychainOption: keychainOption, otherUser: otherUser,
            whileLocked: locked)
    }

    /// In the order they run: what a row leaves behind (an added item, a removed one) is what the
    /// later rows of its face find.
    static let table: [Row] = [
        probe(.keychain, "string(forKey:)", .refused),
        probe(.keychain, "string(forKey:) 40 times", .refused),
        probe(.keychain, "get(_:context:)", .refused),
        probe(.keychain, "attributes(forKey:)", .allowed(why: metadata)),
        probe(.keychain, "contains(_:)", .allowed(why: metadata)),
        probe(.keychain, "allKeys()", .allowed(why: metadata)),
        probe(.keychain, "allItems()", .allowed(why: metadata)),
        probe(.keychain, "Keychain.allItems(in:)", .allowed(why: metadata)),
        probe(.keychain, "accessControl(forKey:)", .allowed(why: metadata)),
        probe(.keychain, "set(_:forKey:)", .refused),
        probe(.keychain, "set(_:forKey:accessControl:)", .refused),
        probe(.keychain, "add(_:forKey:)", .allowed(why: adding)),
        probe(.keychain, "updateAttributes(forKey:)", .refused),
        probe(.keychain, "remove(_:)", .refused),
        probe(.keychain, "removeAll()", .refused),

        probe(.secItem, "SecItemCopyMatching data", .refused),
        probe(.secItem, "SecItemCopyMatching attributes", .allowed(why: metadata)),
        probe(.secItem, "SecItemAdd", .allowed(why: adding)),
        probe(.secItem, "SecItemUpdate", .refused),
        probe(.secItem, "SecItemDelete", .refused),

        probe(.keychainStorage, "data(for:)", .allowed(why: notLockBound)),
        probe(.keychainStorage, "keys()", .allowed(why: notLockBound)),
        probe(.keychainStorage, "put(data:for:)", .allowed(why: notLockBound)),
        probe(.keychainStorage, "removeData(for:)", .allowed(why: notLockBound)),
        probe(.keychainStorage, "removeAllData()", .allowed(why: notLockBound)),
        probe(.keychainStorage, "removeStore(name:)", .allowed(why: notLockBound)),

        Row(
            face: .gitHelper, operation: "get", arguments: ["protocol=https\nhost=git.example\n\n"],
            otherUser: .refused, whileLocked: .refused),
        Row(
            face: .gitHelper, operation: "store", arguments: [credential], otherUser: .refused,
            whileLocked: .refused),
        Row(
            face: .gitHelper, operation: "erase", arguments: [credential], otherUser: .refused,
            whileLocked: .refused),

        cli("find-generic-password", ["-s", service, "-a", "item", "-w"], locked: .refused),
        cli("find-generic-password", ["-s", service, "-a", "item"], locked: .allowed(why: metadata)),
        cli("dump-keychain", locked: .allowed(why: metadata)),
        cli("dump-keychain", ["-d"], locked: .refused),
        cli("add-generic-password", ["-U", "-s", service, "-a", "item", "-w", "replaced"], locked: .refused),
        cli("add-generic-password", ["-s", service, "-a", "cli-new", "-w", "added"], locked: .allowed(why: adding)),
        cli("delete-generic-password", ["-s", service, "-a", "item"], locked: .refused),
        cli("find-internet-password", ["-s", "web.example", "-w"], locked: .allowed(why: internetNotLockBound)),
        cli(
            "add-internet-password", ["-U", "-s", "web.example", "-a", "ada", "-w", "replaced"],
            locked: .allowed(why: internetNotLockBound)),
        cli("delete-internet-password", ["-s", "web.example"], locked: .allowed(why: internetNotLockBound)),
        cli(
            "export", ["--output", "@scratch/archive", "--passphrase-fd", "0", "--list-skipped"],
            locked: .allowed(
                why: "exports what the lock does not bind; the rest is listed as left behind",
                saying: "the keychain is locked")),
        cli(
            "import", ["@scratch/import.csv", "--format", "csv"],
            locked: .notCalled(
                why: "adds items, as adding while locked does (ArchiveTests.importWhileLocked); another user: refused")),
        cli("device-key", locked: .allowed(why: "prints a public key")),
        cli("purge-invalidated", locked: .allowed(why: "removes only items that can never open again")),
        cli("key create", ["--label", "cli-key"], locked: .allowed(why: adding)),
        cli("key list", locked: .allowed(why: metadata)),
        cli("key public", ["--label", "key"], locked: .allowed(why: "a public key is not a secret")),
        cli("key sign", ["--label", "key", "--input", "/etc/passwd", "--base64"], locked: .refused),
        cli("key export", ["--label", "key", "--output", "@scratch/key.pem"], locked: .refused),
        cli("key delete", ["--label", "key"], locked: .refused),
        cli(
            "key add-certificate", ["--label", "key", "--certificate", "@scratch/key.crt"],
            locked: .notCalled(
                why:
                    "adds an item, as key create does while locked; the certificate must be the key's (PKCS11ClientsTests)"
            )),
        cli("grants list", locked: .allowed(why: "grants are rules, not secrets: they are read with the store's key")),
        cli(
            "grants add", ["--allow", "--executable", "/usr/bin/secret-tool"],
            locked: .allowed(why: "a grant unlocks nothing (AccessDecisionTests), as adding while locked works")),
        cli(
            "grants revoke", ["0123456789abcdef0123456789abcdef"],
            locked: .notCalled(why: "names a grant by its ID, which only the owner's list shows (GrantTests)")),
        cli("audit enable", locked: .allowed(why: "the trail records decisions; starting it opens nothing")),
        cli("audit show", locked: .allowed(why: "the trail holds no secret: who asked, for what, when")),
        cli("audit disable", locked: .allowed(why: "stopping the trail is itself its last record")),
        cli("rotate-keys", locked: .refused),
        cli("add-recovery-key", locked: .notCalled(why: "store maintenance; the lock binds items, not the store")),
        cli(
            "recover", otherUser: .notCalled(why: "needs a recovery key"),
            locked: .notCalled(why: "needs a recovery key")),
        cli(
            "accept-rollback-risk", ["--confirm", "@store"],
            locked: .notCalled(why: "store maintenance; the lock binds items, not the store")),
        cli(
            "delete-keychain", ["@store"], keychainOption: false,
            locked: .notCalled(why: "removes the owner's files: a lock guards secrets, not files (SECURITY.md)")),
        cli("create-keychain", otherUser: .notCalled(why: noStore), locked: .notCalled(why: noStore)),
        cli("list-keychains", otherUser: .notCalled(why: noStore), locked: .notCalled(why: noStore)),
        cli("set-passcode", otherUser: .notCalled(why: ownDevice), locked: .notCalled(why: lockItself)),
        cli("change-passcode", otherUser: .notCalled(why: ownDevice), locked: .notCalled(why: lockItself)),
        cli("recover-passcode", otherUser: .notCalled(why: ownDevice), locked: .notCalled(why: lockItself)),
        cli("remove-passcode", otherUser: .notCalled(why: ownDevice), locked: .notCalled(why: lockItself)),
        cli("lock-keychain", otherUser: .notCalled(why: ownDevice), locked: .notCalled(why: lockItself)),
        cli("unlock-keychain", otherUser: .notCalled(why: ownDevice), locked: .notCalled(why: lockItself)),
        cli("tpm-status", otherUser: .notCalled(why: ownDevice), locked: .notCalled(why: lockItself)),
        cli("reset-lockout", otherUser: .notCalled(why: ownDevice), locked: .notCalled(why: lockItself)),
        cli("login-unlock", otherUser: .notCalled(why: ownDevice), locked: .notCalled(why: lockItself)),
        cli("pam-hook", otherUser: .notCalled(why: ownDevice), locked: .notCalled(why: lockItself)),
        cli("follow-screen-lock", otherUser: .notCalled(why: ownDevice), locked: .notCalled(why: lockItself)),
        cli(
            "hold-session",
            otherUser: .notCalled(
                why: "answers through the service for each caller; its socket refuses other users: WarmPathTests"),
            locked: .notCalled(why: "WarmPathTests: a lock erases what it holds, and it answers nothing until unlocked")
        ),
        cli("doctor", otherUser: .notCalled(why: noStore), locked: .notCalled(why: noStore)),
        cli("confirm", otherUser: .notCalled(why: noStore), locked: .notCalled(why: noStore)),
        cli("demo", otherUser: .notCalled(why: noStore), locked: .notCalled(why: noStore)),
        cli(
            "secret-service", otherUser: .notCalled(why: "SecretServiceTests' DecisionTests: every method"),
            locked: .notCalled(why: "SecretServiceTests' DecisionTests: every method")),
    ]

    // MARK: Every operation has a row

    @Test("the table has a row for every operation of the probe, every CLI verb and every git helper action")
    func everyOperationHasARow() throws {
        let probed = try Self.output(Self.tool("tpm-keychain-face-probe"), ["--list"]).split(separator: "\n").map {
            $0.split(separator: "\t").map(String.init)
        }
        #expect(!probed.isEmpty)
        for pair in probed {
            #expect(Self.table.contains { $0.face.rawValue == pair.first && $0.operation == pair.last }, "\(pair)")
        }
        let help = try Self.output(CLI.executable, ["--help"])
        let parents = ["key", "grants", "audit"]
        var verbs = Self.subcommands(help).filter { !parents.contains($0) }
        for parent in parents {
            verbs += Self.subcommands(try Self.output(CLI.executable, [parent, "--help"])).map { parent + " " + $0 }
        }
        #expect(verbs.count > 30, "\(help)")
        let cliRows = Set(Self.table.filter { $0.face == .cli }.map(\.operation))
        #expect(Set(verbs) == cliRows, "verbs without a row: \(Set(verbs).subtracting(cliRows))")
        let usage = try Self.output(Self.tool("git-credential-tpm-keychain"), ["--help"])
        let actions = try #require(usage.firstMatch(of: /\((\w+(?: \| \w+)*)\)/)).output.1.split(separator: " | ")
        #expect(Set(actions.map(String.init)) == Set(Self.table.filter { $0.face == .gitHelper }.map(\.operation)))
        for face in Face.allCases { #expect(Self.table.contains { $0.face == face }, "\(face)") }
    }

    /// The verbs listed under SUBCOMMANDS (two spaces, then the name).
    static func subcommands(_ help: String) -> [String] {
        guard let section = help.range(of: "SUBCOMMANDS:") else { return [] }
        return help[section.upperBound...].split(separator: "\n").compactMap { line in
            line.firstMatch(of: /^  ([a-z][a-z0-9-]*)(?:\s|$)/).map { String($0.output.1) }
        }
    }

    // MARK: The scenarios

    @Test(
        "another local user is refused by every operation of every face that reaches the owner's store, and the owner's items are as they were",
        .enabled(if: geteuid() == 0, "needs root: the test creates a second user with useradd"))
    func anotherUser() throws {
        let world = try World()
        let users = try OtherUsersTests.Users(count: 1)
        defer { users.remove() }
        let mallory = users.names[0]
        let base = "/tmp/tpm-keychain-faces-" + UUID().uuidString
        try FileManager.default.createDirectory(
            atPath: base, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o755])
        defer { try? FileManager.default.removeItem(atPath: base) }
        // The tools where another user can run them (the build directory may be root's alone).
        try CLI.install(at: base + "/tpm-keychain")
        for name in ["tpm-keychain-keys", "tpm-keychain-face-probe", "git-credential-tpm-keychain"] {
            try SystemTool.copyExecutable(Self.tool(name), to: base + "/" + name)
        }
        let home = base + "/home"
        try FileManager.default.createDirectory(
            atPath: home, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        #expect(chown(home, getpwnam(mallory)?.pointee.pw_uid ?? 0, gid_t.max) == 0)
        // Something of their own to import, so that the import is refused for the store, not for its source.
        let source = home + "/import.csv"
        try Data("name,url,username,password,note\nsite,https://site.example/,mallory,planted,\n".utf8).write(
            to: URL(fileURLWithPath: source))
        #expect(chown(source, getpwnam(mallory)?.pointee.pw_uid ?? 0, gid_t.max) == 0)
        let before = try world.snapshot()

        for row in Self.table {
            guard row.otherUser == .refused else { continue }
            let (executable, arguments, input) = world.invocation(row, tools: base, scratch: home)
            let result = try CLI.run(
                ["-u", mallory, "--", "/usr/bin/env", "HOME=\(home)", "XDG_STATE_HOME=\(home)/state"]
                    + world.sharedEnvironment.map { "\($0.key)=\($0.value)" } + [executable] + arguments,
                environment: [:], stdin: input, executable: "/usr/sbin/runuser")
            let said = result.stdout + result.stderr
            #expect(result.status != 0, "\(row.face) \(row.operation) as \(mallory): \(result)")
            switch row.face {
            case .cli, .gitHelper:
                #expect(
                    result.status == 77 && said.contains("cannot be used by this user"), "\(row.operation): \(result)")
            case .keychain:
                #expect(said.hasPrefix("refused permissionDenied"), "\(row.operation): \(result)")
            case .secItem, .keychainStorage:
                #expect(said.hasPrefix("refused"), "\(row.operation): \(result)")
            }
        }
        #expect(try world.snapshot() == before, "another user changed the owner's store")
    }

    @Test(
        "while the keychain is locked, every operation on an item bound to the lock is refused and leaves it as it was; what the lock does not bind is done, as its row says why"
    )
    func whileLocked() throws {
        let world = try World()
        try world.fixture.succeed("lock-keychain")
        for row in Self.table {
            if case .notCalled = row.whileLocked { continue }
            let (executable, arguments, input) = world.invocation(row, tools: nil, scratch: world.scratch)
            let result = try CLI.run(
                arguments, environment: world.environment,
                stdin: input, executable: executable)
            let said = result.stdout + result.stderr
            switch row.whileLocked {
            case .refused:
                switch row.face {
                case .cli, .gitHelper:
                    #expect(
                        result.status == 77 && (said.contains("locked") || said.contains("interaction is not allowed")),
                        "\(row.operation): \(result)")
                case .keychain:
                    #expect(said.hasPrefix("refused interactionNotAllowed"), "\(row.operation): \(result)")
                case .secItem:
                    #expect(said.hasPrefix("refused OSStatus -25308"), "\(row.operation): \(result)")
                case .keychainStorage:
                    Issue.record("KeychainStorage has no lock-bound items: \(row.operation)")
                }
            case .allowed(let why, let saying):
                #expect(result.status == 0, "\(row.face) \(row.operation) (\(why)): \(result)")
                if let saying { #expect(said.contains(saying), "\(row.operation): \(result)") }
            case .notCalled:
                break
            }
        }
        // The lock-bound item and key are as they were: unlocked, the item reads its first value.
        try world.fixture.succeed("unlock-keychain", "--passcode-fd", "0", stdin: World.passcode)
        #expect(
            try world.fixture.succeed("find-generic-password", "-s", Self.service, "-a", "item", "-w").stdout
                == Self.lockBound + "\n")
        let credential = try CLI.run(
            ["--keychain", world.fixture.store, "get"], environment: world.environment,
            stdin: Data("protocol=https\nhost=git.example\n\n".utf8),
            executable: Self.tool("git-credential-tpm-keychain"))
        #expect(credential.status == 0 && credential.stdout.contains("password=from git"), "\(credential)")
        let signature = try CLI.run(
            ["key", "sign", "--keychain", world.fixture.store, "--label", "key", "--input", "/etc/passwd", "--base64"],
            environment: world.fixture.environment)
        #expect(signature.status == 0 && !signature.stdout.isEmpty, "\(signature)")
    }

    // MARK: Support

    /// The owner's store, with the items every row works on: a generic password bound to the lock
    /// (device passcode set), an internet password, a TPM key, a git credential, and a
    /// KeychainStorage store of its own beside it.
    final class World {
        static let passcode = Data("owner passcode 2026\n".utf8)
        let fixture: CLIFixture
        let scratch: String

        init() throws {
            fixture = try CLIFixture()
            scratch = try makeScratchDirectory("faces")
            try fixture.succeed("set-passcode", "--passcode-fd", "0", stdin: Self.passcode)
            try fixture.succeed(
                "add-generic-password", "-s", EveryFaceDecisionTests.service, "-a", "item", "--accessible",
                "whenUnlocked", "-w", EveryFaceDecisionTests.lockBound)
            try fixture.succeed("add-internet-password", "-s", "web.example", "-a", "ada", "-w", "web")
            try CLI.run(
                ["key", "create", "--keychain", fixture.store, "--label", "key"], environment: fixture.environment
            )
            .expectSuccess()
            let stored = try CLI.run(
                ["--keychain", fixture.store, "store"], environment: fixture.environment,
                stdin: Data(EveryFaceDecisionTests.credential.utf8),
                executable: EveryFaceDecisionTests.tool("git-credential-tpm-keychain"))
            #expect(stored.status == 0, "\(stored)")
            let setUp = try CLI.run(
                ["--set-up"], environment: environment,
                executable: EveryFaceDecisionTests.tool("tpm-keychain-face-probe"))
            #expect(setUp.status == 0, "\(setUp)")
        }

        deinit { try? FileManager.default.removeItem(atPath: scratch) }

        /// What every face's process is given besides its user's own directories: the TPM, and
        /// where SecItem's and KeychainStorage's stores are.
        var sharedEnvironment: [String: String] {
            [
                "TPM_KEYCHAIN_TCTI": fixture.simulator.tcti, "TPM_KEYCHAIN_SECITEM_STORE": fixture.store,
                "TPM_KEYCHAIN_STORAGE_ROOT": fixture.directory + "/storage",
            ]
        }

        /// The owner's environment: the fixture's and ``sharedEnvironment``.
        var environment: [String: String?] {
            fixture.environment.merging(sharedEnvironment.mapValues { Optional($0) }) { $1 }
        }

        /// What to run for `row`: the executable (in `tools`, or the build directory), its
        /// arguments (`@scratch` is `scratch`, a directory the caller may write), and its standard input.
        func invocation(_ row: Row, tools: String?, scratch: String) -> (String, [String], Data?) {
            func tool(_ name: String) -> String {
                tools.map { $0 + "/" + name }
                    ?? (name == "tpm-keychain" ? CLI.executable : EveryFaceDecisionTests.tool(name))
            }
            switch row.face {
            case .keychain, .secItem, .keychainStorage:
                return (
                    tool("tpm-keychain-face-probe"), [row.face.rawValue, row.operation, "--keychain", fixture.store],
                    nil
                )
            case .gitHelper:
                return (
                    tool("git-credential-tpm-keychain"), ["--keychain", fixture.store, row.operation],
                    Data(row.arguments.joined().utf8)
                )
            case .cli:
                let arguments = row.arguments.map {
                    $0.replacingOccurrences(of: "@scratch", with: scratch).replacingOccurrences(
                        of: "@store", with: fixture.store)
                }
                let verb = row.operation.split(separator: " ").map(String.init)
                let keychain = row.keychainOption ? ["--keychain", fixture.store] : []
                // A passphrase, twice, for the verbs that read one (export).
                return (tool("tpm-keychain"), verb + keychain + arguments, Data("pass phrase 1\npass phrase 1\n".utf8))
            }
        }

        /// Every file of the owner's stores, with its bytes.
        func snapshot() throws -> [String: Data] {
            var files: [String: Data] = [:]
            for path in regularFiles(under: fixture.directory) where !path.contains("/tpm-state") {
                files[path] = try Data(contentsOf: URL(fileURLWithPath: path))
            }
            return files
        }
    }

    /// A tool built next to the test bundle.
    static func tool(_ name: String) -> String {
        URL(fileURLWithPath: CLI.executable).deletingLastPathComponent().appendingPathComponent(name).path
    }

    static func output(_ executable: String, _ arguments: [String]) throws -> String {
        let result = try CLI.run(arguments, environment: [:], executable: executable)
        return result.stdout + result.stderr
    }
}

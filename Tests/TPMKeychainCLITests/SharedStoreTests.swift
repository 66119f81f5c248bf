import Foundation
import TPMKeychainTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A store shared by the members of a Unix group, used by real users: two members and one
/// outsider, created with useradd for the test and removed after it.
@Suite("stores shared by a group")
struct SharedStoreTests {
    /// Two members of a new group and one user outside it, removed again by ``remove()``.
    final class Users {
        let group: String
        let members: [String]
        let outsider: String

        init() throws {
            let tag = String(UInt32.random(in: 0...UInt32.max), radix: 36)
            group = "tkg" + tag
            members = ["tka" + tag, "tkb" + tag]
            outsider = "tkc" + tag
            try Self.run("/usr/sbin/groupadd", [group])
            for user in members + [outsider] {
                try Self.run("/usr/sbin/useradd", ["-M", "-N", "-s", "/usr/sbin/nologin", user])
            }
            for member in members { try Self.run("/usr/sbin/usermod", ["-a", "-G", group, member]) }
        }

        func remove() {
            for user in members + [outsider] { try? Self.run("/usr/sbin/userdel", [user]) }
            try? Self.run("/usr/sbin/groupdel", [group])
        }

        static func run(_ tool: String, _ arguments: [String]) throws {
            try SystemTool.run(tool, arguments)
        }

        static func userID(_ name: String) -> uid_t? { getpwnam(name).map { $0.pointee.pw_uid } }
    }

    @Test(
        "a directory another member made 2770 for the group, or a simulator state they planted, never becomes a private or a shared store of this user: creation is refused (77) and nothing is written",
        .enabled(if: geteuid() == 0, "needs root: the test creates its users with useradd"))
    func plantedDirectoriesAreRefused() throws {
        let users = try Users()
        defer { users.remove() }
        let base = "/tmp/tpm-keychain-planted-" + UUID().uuidString
        try FileManager.default.createDirectory(
            atPath: base, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o755])
        defer { try? FileManager.default.removeItem(atPath: base) }
        let tool = base + "/tpm-keychain"
        try CLI.install(at: tool)
        let (alice, mallory) = (users.members[0], users.members[1])
        for user in users.members {
            let home = base + "/home-" + user
            try FileManager.default.createDirectory(
                atPath: home, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
            #expect(chown(home, Users.userID(user) ?? 0, gid_t.max) == 0)
        }
        // The team's directory, where every member may create entries.
        let team = base + "/team"
        try FileManager.default.createDirectory(atPath: team, withIntermediateDirectories: false)
        let gid = getgrnam(users.group)?.pointee.gr_gid ?? 0
        #expect(chown(team, 0, gid) == 0 && chmod(team, 0o2770) == 0)
        func run(_ user: String, _ arguments: [String]) throws -> CLIResult {
            // No TPM_KEYCHAIN_TCTI: the store would get a simulated TPM of its own, where a planted one could stand.
            try CLI.run(
                ["-u", user, "--", "/usr/bin/env", "HOME=\(base)/home-\(user)", tool] + arguments,
                environment: [:], executable: "/usr/sbin/runuser")
        }
        // Mallory prepares alice-keys: shared with the team, with a simulator state she keeps a copy of.
        let planted = team + "/alice-keys"
        #expect(
            try CLI.run(
                ["-u", mallory, "--", "/bin/mkdir", "-m", "2770", planted, planted + "/swtpm"], environment: [:],
                executable: "/usr/sbin/runuser"
            ).status == 0)
        let refused = try run(alice, ["create-keychain", planted])
        #expect(refused.status == 77 && refused.stderr.contains("shared with group"), "\(refused)")
        #expect(!FileManager.default.fileExists(atPath: planted + "/store.meta"))
        // Nor does it become Alice's shared store: she did not make it, Mallory may have put anything in it first.
        let sharedRefused = try run(alice, ["create-keychain", "--group", users.group, planted])
        #expect(sharedRefused.status == 77 && sharedRefused.stderr.contains("was made by user"), "\(sharedRefused)")
        #expect(!FileManager.default.fileExists(atPath: planted + "/store.meta"))

        // In Alice's own directory, a simulator state owned by someone else is not used either.
        let own = base + "/home-" + alice + "/keys"
        #expect(
            try CLI.run(
                ["-u", alice, "--", "/bin/mkdir", "-m", "0700", own], environment: [:], executable: "/usr/sbin/runuser"
            ).status == 0)
        try FileManager.default.createDirectory(
            atPath: own + "/swtpm", withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        #expect(chown(own + "/swtpm", Users.userID(mallory) ?? 0, gid_t.max) == 0)
        let foreign = try run(alice, ["create-keychain", own])
        #expect(foreign.status == 77 && foreign.stderr.contains("someone else may keep a copy"), "\(foreign)")
        #expect(!FileManager.default.fileExists(atPath: own + "/store.meta"))
    }

    @Test(
        "two members of the group read and write the same store; a user outside it is refused with a clear error",
        .enabled(if: geteuid() == 0, "needs root: the test creates its users with useradd"))
    func twoMembersAndAnOutsider() throws {
        let simulator = try SoftwareTPM.start()
        defer { simulator.stop() }
        let users = try Users()
        defer { users.remove() }
        // Everything the users touch lives in a directory they can reach (the test's own scratch
        // directories are private to root), the CLI included.
        let base = "/tmp/tpm-keychain-shared-" + UUID().uuidString
        try FileManager.default.createDirectory(
            atPath: base, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o755])
        defer { try? FileManager.default.removeItem(atPath: base) }
        let tool = base + "/tpm-keychain"
        try CLI.install(at: tool)
        let creator = users.members[0]
        // The store's parent: the first member's (a store is created inside a directory its creator may write).
        let parent = base + "/projects"
        try FileManager.default.createDirectory(
            atPath: parent, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o755])
        #expect(chown(parent, Users.userID(creator) ?? 0, gid_t.max) == 0)
        for user in users.members + [users.outsider] {
            let home = base + "/home-" + user
            try FileManager.default.createDirectory(
                atPath: home, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
            #expect(chown(home, Users.userID(user) ?? 0, gid_t.max) == 0)
        }
        let store = parent + "/team"
        func run(_ user: String, _ arguments: [String], stdin: String? = nil) throws -> CLIResult {
            try CLI.run(
                [
                    "-u", user, "--", "/usr/bin/env", "HOME=\(base)/home-\(user)",
                    "TPM_KEYCHAIN_TCTI=\(simulator.tcti)", tool,
                ] + arguments,
                environment: [:], stdin: stdin.map { Data($0.utf8) }, executable: "/usr/sbin/runuser")
        }

        try run(creator, ["create-keychain", "--group", users.group, store]).expectSuccess()
        var status = stat()
        #expect(stat(store, &status) == 0 && status.st_mode & 0o7777 == 0o2770)
        try run(
            creator,
            ["add-generic-password", "--keychain", store, "-s", "deploy", "-a", "first", "-w", "from the first"]
        ).expectSuccess()
        let second = users.members[1]
        #expect(
            try run(second, ["find-generic-password", "--keychain", store, "-s", "deploy", "-a", "first", "-w"]).stdout
                == "from the first\n")
        try run(
            second,
            ["add-generic-password", "--keychain", store, "-s", "deploy", "-a", "second", "-w", "from the second"]
        ).expectSuccess()
        #expect(
            try run(creator, ["find-generic-password", "--keychain", store, "-s", "deploy", "-a", "second", "-w"])
                .stdout == "from the second\n")
        try run(
            second, ["add-generic-password", "--keychain", store, "-s", "deploy", "-a", "first", "-w", "changed", "-U"]
        ).expectSuccess()
        #expect(
            try run(creator, ["find-generic-password", "--keychain", store, "-s", "deploy", "-a", "first", "-w"]).stdout
                == "changed\n")

        // The second member rotates the master key; the first reads on.
        try run(second, ["rotate-keys", "--keychain", store]).expectSuccess()
        #expect(
            try run(creator, ["find-generic-password", "--keychain", store, "-s", "deploy", "-a", "second", "-w"])
                .stdout == "from the second\n")

        // A member's passcode-protected item belongs to that member's device: another member,
        // with a passcode of their own, is refused, and nothing of the first member's is deleted.
        try run(creator, ["set-passcode", "--passcode-fd", "0"], stdin: "first member 1234\n").expectSuccess()
        try run(
            creator,
            [
                "add-generic-password", "--keychain", store, "-s", "deploy", "-a", "pin", "--access-control",
                "devicePasscode",
                "--accessible", "whenUnlockedThisDeviceOnly", "-w", "the first's secret",
            ]
        ).expectSuccess()
        try run(second, ["set-passcode", "--passcode-fd", "0"], stdin: "second member 5678\n").expectSuccess()
        let refused = try run(
            second,
            ["find-generic-password", "--keychain", store, "-s", "deploy", "-a", "pin", "-w", "--passcode-fd", "0"],
            stdin: "second member 5678\n")
        #expect(refused.status == 77 && refused.stderr.contains("another device"), "\(refused)")
        #expect(try run(second, ["purge-invalidated", "--keychain", store]).stdout.contains(": 0 items"))
        #expect(
            try run(
                creator,
                [
                    "find-generic-password", "--keychain", store, "-s", "deploy", "-a", "pin", "-w", "--passcode-fd",
                    "0",
                ],
                stdin: "first member 1234\n"
            ).stdout == "the first's secret\n")

        // Every file and directory: the group's, nothing for others.
        let enumerator = FileManager.default.enumerator(atPath: store)
        while let entry = enumerator?.nextObject() as? String {
            guard lstat(store + "/" + entry, &status) == 0 else { continue }
            #expect(status.st_mode & 0o007 == 0, "\(entry)")
            #expect(status.st_gid == getgrnam(users.group)?.pointee.gr_gid, "\(entry)")
        }

        let outsider = try run(
            users.outsider, ["find-generic-password", "--keychain", store, "-s", "deploy", "-a", "first", "-w"])
        #expect(outsider.status == 77, "\(outsider)")
        #expect(outsider.stderr.contains("Permission denied"), "\(outsider)")
        #expect(outsider.stdout.isEmpty)

        // A file opened to others is refused as unsafe, not used: the store accepts its group and nothing looser.
        let item = try FileManager.default.subpathsOfDirectory(atPath: store).first { $0.hasSuffix(".item") } ?? ""
        #expect(chmod(store + "/" + item, 0o664) == 0)
        let loose = try run(second, ["dump-keychain", "--keychain", store])
        #expect(
            loose.status == 77 && loose.stderr.contains("a shared store allows its group and no one else"), "\(loose)")

        // Creating a shared store for a group one is not in is refused.
        let notMember = try run(
            users.outsider, ["create-keychain", "--group", users.group, base + "/home-" + users.outsider + "/mine"])
        #expect(notMember.status == 77 && notMember.stderr.contains("not a member"), "\(notMember)")
    }
}

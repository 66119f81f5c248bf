import Foundation
import TPMKeychainTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// What another local user who can use the same TPM can do to a user's device: its NV indices
/// (enrollment counter, passcode counter, lock state) with tpm2-tools, run as a real second user
/// created with useradd for the test.
@Suite("other local users and the device's NV indices", .serialized)
struct OtherUsersTests {
    static let passcode = "owner passcode 2026"

    /// Users made with useradd for one test, removed by ``remove()``.
    final class Users {
        let names: [String]

        init(count: Int, userIDs: [uid_t]? = nil) throws {
            let tag = String(UInt32.random(in: 0...UInt32.max), radix: 36)
            names = (0..<count).map { "tko\($0)" + tag }
            for (index, name) in names.enumerated() {
                var arguments = ["-M", "-N", "-s", "/usr/sbin/nologin"]
                if let userIDs { arguments += ["-u", String(userIDs[index])] }
                try SystemTool.run("/usr/sbin/useradd", arguments + [name])
            }
        }

        func remove() {
            for name in names { try? SystemTool.run("/usr/sbin/userdel", [name]) }
        }
    }

    /// tpm2-tools as `user`, against `tcti`.
    static func tpm2(_ user: String, tcti: String, _ arguments: [String], stdin: Data? = nil) throws -> CLIResult {
        try CLI.run(
            ["-u", user, "--", "/usr/bin/env", "TPM2TOOLS_TCTI=\(tcti)"] + arguments, environment: [:], stdin: stdin,
            executable: "/usr/sbin/runuser")
    }

    /// The device's three NV handles as tpm-status prints them.
    static func handles(_ status: String) -> [String] {
        status.matches(of: /\(NV (0x[0-9a-f]{8})/).map { String($0.output.1) }
    }

    @Test(
        "review 3, N1: with the owner hierarchy's empty authorization another user undefines every NV index in the TPM and squats one; the owner's passcode is reported as gone (69, naming the owner password), nothing is deleted or unlocked; the owner accepts the rollback risk and, with the store's recovery key, makes the passcode work again: every item reads, the old passcode does not",
        .enabled(if: geteuid() == 0, "needs root: the test creates a second user with useradd"))
    func anotherUserUndefinesEveryIndex() throws {
        let fixture = try CLIFixture()
        let users = try Users(count: 1)
        defer { users.remove() }
        let mallory = users.names[0]
        let tcti = fixture.simulator.tcti
        let passcode = Data((Self.passcode + "\n").utf8)
        try fixture.succeed("add-generic-password", "-s", "svc", "-a", "plain", "--accessible", "always", "-w", "open")
        let recoveryKey = try fixture.succeed("add-recovery-key").stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        // Set with a recovery key in place: the passcode key is escrowed to it.
        try fixture.succeed("set-passcode", "--passcode-fd", "0", stdin: passcode)
        try fixture.succeed(
            "add-generic-password", "-s", "svc", "-a", "pin", "--access-control", "devicePasscode",
            "--accessible", "whenUnlockedThisDeviceOnly", "-w", "behind the passcode")
        try fixture.succeed(
            "add-generic-password", "-s", "svc", "-a", "locked", "--accessible", "whenUnlocked", "-w", "lock-bound")
        let lockState = try #require(Self.handles(try fixture.succeed("tpm-status").stdout).last)
        let files = regularFiles(under: fixture.store).sorted()

        // Every index in the range, without knowing whose is whose.
        let listed = try Self.tpm2(mallory, tcti: tcti, ["tpm2_getcap", "handles-nv-index"])
        let indices = listed.stdout.matches(of: /0x[0-9A-Fa-f]+/).map { String($0.output) }
        #expect(indices.count >= 4, "\(listed)")
        for index in indices {
            let undefined = try Self.tpm2(mallory, tcti: tcti, ["tpm2_nvundefine", index, "-C", "o"])
            #expect(undefined.status == 0, "\(undefined)")
        }
        // And one of their own where the lock state was, with their own authorization.
        let squatted = try Self.tpm2(
            mallory, tcti: tcti,
            [
                "tpm2_nvdefine", lockState, "-C", "o", "-s", "2", "-a", "authread|authwrite|no_da|clear_stclear", "-p",
                "x",
            ])
        #expect(squatted.status == 0, "\(squatted)")

        let unlock = try fixture.run("unlock-keychain", "--passcode-fd", "0", stdin: passcode)
        #expect(unlock.status == 69, "\(unlock)")
        #expect(unlock.stderr.contains("passcode counter") && unlock.stderr.contains("owner password"), "\(unlock)")
        // The store's rollback counter went too: the owner decides to accept the files as they are.
        let refused = try fixture.run("find-generic-password", "-s", "svc", "-a", "plain", "-w")
        #expect(refused.status != 0 && refused.stderr.contains("rollback counter"), "\(refused)")
        try fixture.succeed("accept-rollback-risk", "--confirm", fixture.store)
        #expect(try fixture.succeed("find-generic-password", "-s", "svc", "-a", "plain", "-w").stdout == "open\n")
        let pin = try fixture.run(
            "find-generic-password", "-s", "svc", "-a", "pin", "-w", "--passcode-fd", "0", stdin: passcode)
        #expect(pin.status != 0 && pin.stdout.isEmpty, "\(pin)")
        // Nothing deleted: every file of the store is still there.
        #expect(Set(files).isSubset(of: Set(regularFiles(under: fixture.store))), "\(files)")

        // The recovery key and a new passcode: the same passcode key, sealed anew; locked at first.
        let newPasscode = "owner's new passcode"
        let wrongKey = try fixture.run(
            "recover-passcode", "--passcode-fd", "0",
            stdin: Data(
                "cbcbcbcb-cbcbcbcb-cbcbcbcb-cbcbcbcb-cbcbcbcb-cbcbcbcb-cbcbcbcb-cbcbcbcb\n\(newPasscode)\n".utf8))
        #expect(wrongKey.status != 0, "\(wrongKey)")
        try fixture.succeed(
            "recover-passcode", "--passcode-fd", "0", stdin: Data("\(recoveryKey)\n\(newPasscode)\n".utf8))
        #expect(try fixture.run("find-generic-password", "-s", "svc", "-a", "locked", "-w").status == 77)
        try fixture.succeed("unlock-keychain", "--passcode-fd", "0", stdin: Data("\(newPasscode)\n".utf8))
        #expect(
            try fixture.succeed("find-generic-password", "-s", "svc", "-a", "locked", "-w").stdout == "lock-bound\n")
        let opened = try fixture.succeed(
            "find-generic-password", "-s", "svc", "-a", "pin", "-w", "--passcode-fd", "0",
            stdin: Data("\(newPasscode)\n".utf8))
        #expect(opened.stdout == "behind the passcode\n")
        #expect(try fixture.run("unlock-keychain", "--passcode-fd", "0", stdin: passcode).status != 0)
    }

    @Test(
        "another user can neither move the counters nor write or read the lock state; a lock survives them; an index they define again in its place is reported as taken, and nothing of the owner's is deleted or unlocked",
        .enabled(if: geteuid() == 0, "needs root: the test creates a second user with useradd"))
    func anotherUserCannotUseTheIndices() throws {
        let fixture = try CLIFixture()
        let users = try Users(count: 1)
        defer { users.remove() }
        let mallory = users.names[0]
        let tcti = fixture.simulator.tcti
        try fixture.succeed("set-passcode", "--passcode-fd", "0", stdin: Data((Self.passcode + "\n").utf8))
        try fixture.succeed(
            "add-generic-password", "-s", "svc", "-a", "unlocked", "--accessible", "whenUnlocked", "-w",
            "kept while locked")
        try fixture.succeed(
            "add-generic-password", "-s", "svc", "-a", "pin", "--access-control", "devicePasscode",
            "--accessible", "whenUnlockedThisDeviceOnly", "-w", "behind the passcode")
        let status = try fixture.succeed("tpm-status").stdout
        let handles = Self.handles(status)
        #expect(handles.count == 3 && status.contains("the device's own"), "\(status)")
        // Not in the TPM manufacturers' range, nor derived from the user ID.
        #expect(
            handles.allSatisfy {
                $0.hasPrefix("0x018") || $0.hasPrefix("0x019") || $0.hasPrefix("0x01a") || $0.hasPrefix("0x01b")
            }, "\(handles)")
        guard handles.count == 3 else { return }
        let (enrollment, passcodeCounter, lockState) = (handles[0], handles[1], handles[2])

        // Moving either counter, reading them, writing the lock state: each refused by the TPM.
        for (what, arguments, input) in [
            ("increment the enrollment counter", ["tpm2_nvincrement", enrollment], nil as Data?),
            ("increment the passcode counter", ["tpm2_nvincrement", passcodeCounter], nil),
            ("read the passcode counter", ["tpm2_nvread", passcodeCounter, "-s", "8"], nil),
        ] {
            let result = try Self.tpm2(mallory, tcti: tcti, arguments, stdin: input)
            #expect(result.status != 0, "\(mallory) could \(what): \(result)")
        }
        try fixture.succeed("lock-keychain")
        let unlockAttempt = try Self.tpm2(
            mallory, tcti: tcti, ["tpm2_nvwrite", lockState, "-i", "-"], stdin: Data([1, 1]))
        #expect(unlockAttempt.status != 0, "\(mallory) wrote the lock state: \(unlockAttempt)")
        #expect(
            try fixture.run("find-generic-password", "-s", "svc", "-a", "unlocked", "-w").status == 77, "still locked")
        let after = try fixture.succeed("tpm-status").stdout
        #expect(after.contains("passcode counter:  1"), "\(after)")
        try fixture.succeed("unlock-keychain", "--passcode-fd", "0", stdin: Data((Self.passcode + "\n").utf8))
        #expect(
            try fixture.succeed("find-generic-password", "-s", "svc", "-a", "unlocked", "-w").stdout
                == "kept while locked\n")
        #expect(
            try fixture.succeed(
                "find-generic-password", "-s", "svc", "-a", "pin", "-w", "--passcode-fd", "0",
                stdin: Data((Self.passcode + "\n").utf8)
            ).stdout == "behind the passcode\n")

        // With the TPM owner's (empty) authorization they can undefine the lock state and define
        // their own in its place, unlocked: it is reported as taken, never read as unlocked.
        try fixture.succeed("lock-keychain")
        #expect(try Self.tpm2(mallory, tcti: tcti, ["tpm2_nvundefine", lockState, "-C", "o"]).status == 0)
        let squatted = try Self.tpm2(
            mallory, tcti: tcti,
            [
                "tpm2_nvdefine", lockState, "-C", "o", "-s", "2", "-a",
                "authread|authwrite|no_da|clear_stclear", "-p", "mallory",
            ])
        #expect(squatted.status == 0, "\(squatted)")
        #expect(
            try Self.tpm2(
                mallory, tcti: tcti, ["tpm2_nvwrite", lockState, "-i", "-", "-P", "mallory"], stdin: Data([1, 1])
            ).status == 0)
        let refused = try fixture.run("find-generic-password", "-s", "svc", "-a", "unlocked", "-w")
        #expect(
            refused.status != 0 && refused.stdout.isEmpty, "read through a lock state someone else wrote: \(refused)")
        #expect(refused.stderr.contains("someone else"), "\(refused)")
        // Nothing was deleted: both items are still listed.
        let dump = try fixture.succeed("dump-keychain").stdout
        #expect(dump.contains("\"unlocked\"") && dump.contains("\"pin\""), "\(dump)")
    }

    @Test(
        "two users whose user IDs are equal modulo 4096 share no NV index: each has a passcode of their own, and one's change leaves the other's items readable",
        .enabled(if: geteuid() == 0, "needs root: the test creates users with chosen user IDs"))
    func userIDsEqualModulo4096ShareNothing() throws {
        let simulator = try SoftwareTPM.start()
        defer { simulator.stop() }
        let base = uid_t(20_000 + Int.random(in: 0..<4_000))
        let users = try Users(count: 2, userIDs: [base, base + 4096])
        defer { users.remove() }
        let directory = "/tmp/tpm-keychain-uids-" + UUID().uuidString
        try FileManager.default.createDirectory(
            atPath: directory, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o755])
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let tool = directory + "/tpm-keychain"
        try CLI.install(at: tool)
        for user in users.names {
            let home = directory + "/home-" + user
            try FileManager.default.createDirectory(
                atPath: home, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
            #expect(chown(home, getpwnam(user)?.pointee.pw_uid ?? 0, gid_t.max) == 0)
        }
        func run(_ user: String, _ arguments: [String], stdin: String? = nil) throws -> CLIResult {
            let home = directory + "/home-" + user
            return try CLI.run(
                ["-u", user, "--", "/usr/bin/env", "HOME=\(home)", "TPM_KEYCHAIN_TCTI=\(simulator.tcti)", tool]
                    + arguments
                    + ["--keychain", home + "/store"],
                environment: [:], stdin: stdin.map { Data($0.utf8) }, executable: "/usr/sbin/runuser")
        }
        var handles: [[String]] = []
        for user in users.names {
            try run(user, ["set-passcode", "--passcode-fd", "0"], stdin: "\(user) passcode\n").expectSuccess()
            try run(
                user,
                [
                    "add-generic-password", "-s", "svc", "-a", "pin", "--access-control", "devicePasscode",
                    "--accessible", "whenUnlockedThisDeviceOnly", "-w", "secret of \(user)",
                ]
            ).expectSuccess()
            let status = try run(user, ["tpm-status"])
            handles.append(Self.handles(status.stdout))
        }
        #expect(Set(handles[0]).isDisjoint(with: Set(handles[1])) && handles[0].count == 3, "\(handles)")
        try run(
            users.names[0], ["change-passcode", "--passcode-fd", "0"],
            stdin: "\(users.names[0]) passcode\nchanged passcode\n"
        ).expectSuccess()
        let other = users.names[1]
        #expect(
            try run(
                other, ["find-generic-password", "-s", "svc", "-a", "pin", "-w", "--passcode-fd", "0"],
                stdin: "\(other) passcode\n"
            )
            .stdout == "secret of \(other)\n")
    }
}

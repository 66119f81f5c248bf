import Foundation
import SystemCalls
import TPMKeychainTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Review 3, item 11: a user's store bound to them through the enrollment helper, so that a copy
/// of its files opens for no other user of the same TPM. Two real users (useradd), one swtpm, the
/// real helper and CLI, each run as its user with runuser.
@Suite("stores bound to their user", .serialized)
struct UserBindingTests {
    @Test(
        "with the enrollment helper, a store made before it is bound at its next open and a new one at creation; a copy given to another user opens for them neither as it is nor with their user ID written into it, and costs no dictionary-attack try; the owner reads every item; without the helper the bound store says what to start; a rotation keeps the binding, a helper key lost is healed by the recovery key with every item kept; a wrong secret in the keyring is asked for again; before binding the copy opened (what the helper closes)",
        .enabled(if: geteuid() == 0, "needs root: the helper runs as root and the test creates two users"))
    func aCopiedStoreOpensForNobodyElse() throws {
        let helper = try EnrollmentHelper.start()
        defer { helper.stop() }
        let simulator = try SoftwareTPM.start()
        defer { simulator.stop() }
        let tag = String(UInt32.random(in: 0...UInt32.max), radix: 36)
        let (alice, bob) = ("tkba" + tag, "tkbb" + tag)
        for user in [alice, bob] {
            try SystemTool.run("/usr/sbin/useradd", ["-M", "-N", "-s", "/usr/sbin/nologin", user])
        }
        defer { for user in [alice, bob] { try? SystemTool.run("/usr/sbin/userdel", [user]) } }
        let directory = "/tmp/tpm-keychain-binding-" + UUID().uuidString
        try FileManager.default.createDirectory(
            atPath: directory, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o755])
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let tool = directory + "/tpm-keychain"
        try SystemTool.copyExecutable(Self.cli, to: tool)
        func home(_ user: String) -> String { directory + "/home-" + user }
        for user in [alice, bob] {
            try FileManager.default.createDirectory(
                atPath: home(user), withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
            #expect(chown(home(user), try Self.userID(user), gid_t.max) == 0)
        }
        /// The CLI as `user` on their store, with the helper at `socket`; its exit status, output and errors.
        func run(
            _ user: String, _ arguments: [String], store: String? = nil, socket: String? = nil
        ) throws -> (status: Int32, output: String) {
            let command =
                [
                    "-u", user, "--", "/usr/bin/env", "HOME=\(home(user))", "TPM_KEYCHAIN_TCTI=\(simulator.tcti)",
                    "TPM_KEYCHAIN_ENROLLMENT_HELPER=\(socket ?? helper.socketPath)", tool,
                ] + arguments + ["--keychain", store ?? home(user) + "/store"]
            do {
                return (0, String(decoding: try SystemTool.output("/usr/sbin/runuser", command), as: UTF8.self))
            } catch let failure as SystemTool.Failure {
                let status = failure.description.firstMatch(of: /exited with (\d+)/).flatMap { Int32($0.output.1) }
                return (status ?? -1, failure.description)
            }
        }
        func read(
            _ user: String, _ account: String, store: String? = nil, socket: String? = nil
        ) throws -> (
            status: Int32, output: String
        ) {
            try run(user, ["find-generic-password", "-s", "svc", "-a", account, "-w"], store: store, socket: socket)
        }
        /// Gives `bob` a copy of alice's store, as a world-readable backup would.
        func copyForBob(_ name: String) throws -> String {
            let copy = home(bob) + "/" + name
            try SystemTool.run("/bin/cp", ["-a", home(alice) + "/store", copy])
            try SystemTool.run("/bin/chown", ["-R", bob, copy])
            return copy
        }
        let noHelper = directory + "/no-helper.sock"

        // Before the helper: the store is not bound, and its copy opens for another user.
        #expect(
            try run(
                alice, ["add-generic-password", "-s", "svc", "-a", "before", "-w", "made unbound"], socket: noHelper
            )
            .status == 0)
        #expect(try Self.storedVersion(home(alice) + "/store") == 6)
        let unboundCopy = try copyForBob("unbound-copy")
        #expect(try read(bob, "before", store: unboundCopy, socket: noHelper).output == "made unbound\n")

        // With the helper: the next open binds it (version 7, naming alice); new items go in as ever.
        #expect(try read(alice, "before").output == "made unbound\n")
        #expect(try Self.storedVersion(home(alice) + "/store") == 7)
        #expect(try Self.boundUser(home(alice) + "/store") == Self.userID(alice))
        #expect(try run(alice, ["add-generic-password", "-s", "svc", "-a", "after", "-w", "made bound"]).status == 0)

        // A copy for bob: refused as another user's, with or without the helper.
        let boundCopy = try copyForBob("bound-copy")
        for socket in [helper.socketPath, noHelper] {
            let refused = try read(bob, "before", store: boundCopy, socket: socket)
            #expect(refused.status != 0 && refused.output.contains("bound to user \(alice)"), "\(refused)")
            #expect(!refused.output.contains("made unbound"), "\(refused)")
        }
        // Bob writes his own user ID into the copy: the TPM refuses his binding secret (noDA: the
        // lockout counter does not move), and nothing else authenticates before it.
        let before = try Self.lockoutCounter(simulator.tcti)
        try Self.writeBoundUser(boundCopy, try Self.userID(bob))
        let forged = try read(bob, "after", store: boundCopy)
        #expect(forged.status != 0 && forged.output.contains("binding secret does not open it"), "\(forged)")
        #expect(!forged.output.contains("made bound"), "\(forged)")
        #expect(try Self.lockoutCounter(simulator.tcti) == before)

        // The owner reads everything; without the helper, the error says what to start.
        #expect(try read(alice, "before").output == "made unbound\n")
        #expect(try read(alice, "after").output == "made bound\n")
        let stopped = try read(alice, "after", socket: noHelper)
        #expect(stopped.status == 69 && stopped.output.contains("install-enrollment-helper"), "\(stopped)")

        // A key rotation keeps the binding. A helper whose key was lost (another helper, another
        // key) cannot open the store, and nothing is removed; the recovery key binds it again.
        let recoveryKey = try run(alice, ["add-recovery-key"]).output.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(try run(alice, ["rotate-keys"]).status == 0)
        #expect(try Self.boundUser(home(alice) + "/store") == Self.userID(alice))
        #expect(try read(alice, "after").output == "made bound\n")
        let replaced = try EnrollmentHelper.start()
        defer { replaced.stop() }
        let lost = try read(alice, "after", socket: replaced.socketPath)
        #expect(lost.status != 0 && lost.output.contains("recovery key"), "\(lost)")
        let recovery = try SystemTool.output(
            "/usr/sbin/runuser",
            [
                "-u", alice, "--", "/usr/bin/env", "HOME=\(home(alice))", "TPM_KEYCHAIN_TCTI=\(simulator.tcti)",
                "TPM_KEYCHAIN_ENROLLMENT_HELPER=\(replaced.socketPath)", tool, "recover", "--keychain",
                home(alice) + "/store",
            ], input: Data((recoveryKey + "\n").utf8))
        #expect(!recovery.isEmpty)
        #expect(try read(alice, "before", socket: replaced.socketPath).output == "made unbound\n")
        #expect(try read(alice, "after", socket: replaced.socketPath).output == "made bound\n")
        #expect(try read(alice, "after").status != 0)

        // A store bob makes with the helper is bound from its creation; doctor says so.
        #expect(try run(bob, ["add-generic-password", "-s", "svc", "-a", "own", "-w", "bob's"]).status == 0)
        #expect(try Self.boundUser(home(bob) + "/store") == Self.userID(bob))
        let doctor = try run(bob, ["doctor"]).output
        #expect(doctor.contains("bound to user ID \(try Self.userID(bob))"), "\(doctor)")
        #expect(doctor.contains("gives this user a binding secret"), "\(doctor)")

        // The secret a helper gave stays a while in the owner's kernel keyring: lookups go on
        // with that helper stopped; the other user cannot even see the entry.
        func keys(as user: String) throws -> String {
            let output = try SystemTool.output("/usr/sbin/runuser", ["-u", user, "--", "/bin/cat", "/proc/keys"])
            return String(decoding: output, as: UTF8.self)
        }
        let entry = "tpm-keychain:user-binding:v1:" + replaced.socketPath
        #expect(try !keys(as: bob).contains(entry))
        if Self.kernelKeyringIsUsable {
            // A wrong secret in the keyring (the helper's key changed since it was kept): the
            // TPM refuses it, the helper is asked again, and the item reads.
            let planted = try SystemTool.output(
                "/usr/sbin/runuser",
                [
                    "-u", alice, "--", "/usr/bin/python3", "-c",
                    """
                    import ctypes, sys
                    libc = ctypes.CDLL(None, use_errno=True)
                    key = libc.syscall(248, b"user", sys.argv[1].encode(), bytes(32), 32, -4)
                    print(key)
                    """,
                    entry,
                ])
            #expect(
                Int(String(decoding: planted, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1 > 0)
            #expect(try read(alice, "after", socket: replaced.socketPath).output == "made bound\n")
        }
        replaced.stop(keepingSocket: true)
        let cachedRead = try read(alice, "before", socket: replaced.socketPath)
        if Self.kernelKeyringIsUsable {
            #expect(try keys(as: alice).contains(entry))
            #expect(cachedRead.output == "made unbound\n")
        } else {
            // A container whose seccomp profile refuses keyctl: no cache, so the helper is needed.
            #expect(cachedRead.status == 69, "\(cachedRead)")
        }
    }

    /// Whether this kernel (and seccomp profile) lets a process keep a key in its user keyring.
    static let kernelKeyringIsUsable: Bool = {
        let name = "tpm-keychain:test-probe:" + UUID().uuidString
        defer { UserKeyring.remove(name) }
        return [UInt8](repeating: 7, count: 4).withUnsafeBytes { UserKeyring.store(name, $0, timeoutSeconds: 60) }
    }()

    static let cli: String = {
        let bundle =
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        return URL(fileURLWithPath: bundle).deletingLastPathComponent().appendingPathComponent("tpm-keychain").path
    }()

    static func userID(_ user: String) throws -> uid_t {
        guard let entry = getpwnam(user) else { throw FprintdMockError(description: "no user \(user)") }
        return entry.pointee.pw_uid
    }

    /// store.meta's version field (docs/FORMAT.md, "store.meta").
    static func storedVersion(_ store: String) throws -> UInt16 {
        let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: store + "/store.meta")))
        return UInt16(bytes[4]) << 8 | UInt16(bytes[5])
    }

    /// Version 7's user ID (offset 36), when its sharing byte (35) says bound.
    static func boundUser(_ store: String) throws -> uid_t? {
        let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: store + "/store.meta")))
        guard bytes[35] == 2 else { return nil }
        return bytes[36..<40].reduce(0) { $0 << 8 | uid_t($1) }
    }

    static func writeBoundUser(_ store: String, _ user: uid_t) throws {
        let url = URL(fileURLWithPath: store + "/store.meta")
        var bytes = [UInt8](try Data(contentsOf: url))
        for index in 0..<4 { bytes[36 + index] = UInt8(truncatingIfNeeded: user >> (24 - 8 * UInt32(index))) }
        try Data(bytes).write(to: url)
    }

    /// TPM2_PT_LOCKOUT_COUNTER, read with tpm2-tools.
    static func lockoutCounter(_ tcti: String) throws -> String {
        let text = String(
            decoding: try SystemTool.output("/usr/bin/tpm2_getcap", ["-T", tcti, "properties-variable"]), as: UTF8.self)
        guard let match = text.firstMatch(of: /TPM2_PT_LOCKOUT_COUNTER:\s*(\S+)/) else {
            throw FprintdMockError(description: "no lockout counter in \(text)")
        }
        return String(match.output.1)
    }
}

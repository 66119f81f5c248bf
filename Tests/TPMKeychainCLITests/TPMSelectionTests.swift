import Foundation
import KeychainStore
import TPM
import TPMKeychain
import TPMKeychainTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Which TPM the CLI talks to, what it says about it, and what happens when it is the wrong one.
@Suite("TPM selection and status")
struct TPMSelectionTests {
    @Test("tpm-status names a swtpm TCTI SIMULATED and shows its dictionary-attack counters")
    func status() throws {
        let fixture = try CLIFixture()
        // Distinctive values, so the counters shown must come from this TPM.
        try fixture.simulator.setDictionaryAttackParameters(maxTries: 17, recoveryTime: 123, lockoutRecovery: 45)
        let define = try TPM2Tools.run(
            ["tpm2_nvdefine", "0x1500017", "-C", "o", "-s", "8", "-a", "ownerread|ownerwrite|nt=counter"],
            tcti: fixture.simulator.tcti)
        #expect(define.status == 0, "\(define.errorOutput)")

        let result = try fixture.succeed("tpm-status")
        let output = result.stdout
        #expect(output.contains("SIMULATED"), "\(output)")
        #expect(output.contains("simulated:    yes"))
        #expect(output.contains(fixture.simulator.tcti))
        #expect(output.contains("manufacturer: IBM"))
        #expect(output.contains(/storage key:  (ecc-p256|rsa-2048), name 000b[0-9a-f]{64}/), "\(output)")
        #expect(output.contains("lockout counter:   0 failed authorizations (not in lockout)"), "\(output)")
        #expect(output.contains("max tries:         17"))
        #expect(output.contains("recovery interval: 123 s"))
        #expect(output.contains("lockout recovery:  45 s"))
        #expect(output.contains("NV counters:       1 defined"))
        #expect(output.contains("keychain:     \"\(fixture.store)\" (does not exist yet)"))

        try fixture.succeed("add-generic-password", "-s", "svc", "-a", "a", "-w", "b")
        #expect(try fixture.succeed("tpm-status").stdout.contains("\"\(fixture.store)\" (exists)"))
    }

    @Test(
        "tpm-status says whether ESAPI shares one OpenSSL context, and TPM_KEYCHAIN_ESYS_SHARED_CONTEXT=0 turns the sharing off while everything still works"
    )
    func sharedCryptoContextSwitch() throws {
        let fixture = try CLIFixture()
        // tpm2-tss 3.x is patched; 4.x (Esys_SetCryptoCallbacks) gets callbacks instead.
        let shared = try fixture.succeed("tpm-status").stdout
        #expect(
            shared.contains("esapi crypto: ESAPI shares one OpenSSL library context (libtss2-esys.so.0 (tpm2-tss 3.x")
                || shared.contains(
                    "esapi crypto: ESAPI's crypto callbacks use one OpenSSL library context (tpm2-tss 4.x) (libtss2-esys.so.0 (tpm2-tss 4.x"
                ),
            "\(shared)")
        let off = fixture.environment.merging(["TPM_KEYCHAIN_ESYS_SHARED_CONTEXT": "0"]) { _, new in new }
        let status = try CLI.run(["tpm-status", "--keychain", fixture.store], environment: off)
        #expect(
            status.status == 0
                && status.stdout.contains("esapi crypto: disabled by TPM_KEYCHAIN_ESYS_SHARED_CONTEXT=0"), "\(status)")
        #expect(
            try CLI.run(
                ["add-generic-password", "--keychain", fixture.store, "-s", "s", "-a", "a", "-w", "v"], environment: off
            ).status == 0)
        let found = try CLI.run(
            ["find-generic-password", "--keychain", fixture.store, "-s", "s", "-a", "a", "-w"], environment: off)
        #expect(found.status == 0 && found.stdout == "v\n", "\(found)")
    }

    @Test("a store sealed by one TPM cannot be opened with another: non-zero exit naming another TPM")
    func wrongTPM() throws {
        let fixture = try CLIFixture()
        try fixture.succeed("add-generic-password", "-s", "svc", "-a", "alice", "-w", "bound-to-the-first-tpm")
        let other = try SoftwareTPM.start()
        defer { other.stop() }
        for arguments in [["find-generic-password", "-s", "svc", "-a", "alice", "-w"], ["dump-keychain", "-d"]] {
            let result = try CLI.run(
                [arguments[0], "--keychain", fixture.store] + arguments.dropFirst(),
                environment: fixture.environment.merging(["TPM_KEYCHAIN_TCTI": other.tcti]) { $1 })
            #expect(result.status == 65, "\(result)")
            #expect(result.stderr.contains("another TPM"), "\(result)")
            #expect(!result.stdout.contains("bound-to-the-first-tpm"))
        }
        // The first TPM still opens it.
        #expect(
            try fixture.succeed("find-generic-password", "-s", "svc", "-a", "alice", "-w").stdout
                == "bound-to-the-first-tpm\n")
    }

    @Test(
        "a swtpm reached by a TCTI that does not say so, as a device would be, is reported SIMULATED by what it says it is"
    )
    func softwareTPMReachedAsADevice() throws {
        let simulator = try SoftwareTPM.start()
        defer { simulator.stop() }
        let directory = try makeScratchDirectory("plain-tcti")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // The swtpm TCTI under a name that says nothing (as /dev/tpmrm0 says nothing of what is behind it).
        let library = directory + "/libtss2-tcti-plain.so"
        // The library itself, not its symbolic link (copyItem copies a link as a link).
        let installed = URL(fileURLWithPath: "/usr/lib/\(Self.multiarch)/libtss2-tcti-swtpm.so.0")
            .resolvingSymlinksInPath().path
        try FileManager.default.copyItem(atPath: installed, toPath: library)
        let tcti = library + simulator.tcti.drop { $0 != ":" }
        #expect(!TPMConfiguration(tcti: tcti).isSimulator, "the name must not give it away")
        let description = try {
            let connection = try TPMConnection(TPMConfiguration(tcti: tcti))
            defer { connection.close() }
            return try connection.describe()
        }()
        #expect(description.isSimulator && description.manufacturer == "IBM", "\(description)")

        let store = directory + "/keychain"
        let environment: [String: String?] = ["TPM_KEYCHAIN_TCTI": tcti]
        let added = try CLI.run(
            ["add-generic-password", "--keychain", store, "-s", "svc", "-a", "a", "-w", "kept"],
            environment: environment)
        #expect(added.status == 0 && added.stderr.contains("reports itself as a software TPM"), "\(added)")
        #expect(try KeychainLocation(path: store).recordedTPMIsSimulated == true, "store.meta records a simulated TPM")
        let found = try CLI.run(
            ["find-generic-password", "--keychain", store, "-s", "svc", "-a", "a", "-w"], environment: environment)
        #expect(found.status == 0 && found.stdout == "kept\n" && found.stderr.contains("SIMULATED"), "\(found)")
        let status = try CLI.run(["tpm-status", "--keychain", store], environment: environment)
        #expect(status.stdout.contains("simulated:    yes"), "\(status)")
        #expect(status.stdout.contains("reports itself as a software TPM: SIMULATED"), "\(status)")
        let doctor = try CLI.run(["doctor", "--keychain", store], environment: environment)
        #expect(doctor.stdout.contains("is a simulated TPM (IBM"), "\(doctor)")
    }

    /// Debian's multiarch directory for this machine's libraries.
    static var multiarch: String {
        #if arch(arm64)
        "aarch64-linux-gnu"
        #else
        "x86_64-linux-gnu"
        #endif
    }

    @Test(
        "a store created on a TPM with no room for its rollback counter works, and the command that created it says so, once"
    )
    func noRoomForARollbackCounter() throws {
        let simulator = try SoftwareTPM.start()
        defer { simulator.stop() }
        _ = try NVMemory.fill(tcti: simulator.tcti)
        let directory = try makeScratchDirectory("nv-full")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = directory + "/keychain"
        let environment: [String: String?] = ["TPM_KEYCHAIN_TCTI": simulator.tcti]
        let added = try CLI.run(
            ["add-generic-password", "--keychain", store, "-s", "svc", "-a", "a", "-w", "kept"],
            environment: environment)
        #expect(added.status == 0 && added.stderr.contains("no room for this store's rollback counter"), "\(added)")
        let found = try CLI.run(
            ["find-generic-password", "--keychain", store, "-s", "svc", "-a", "a", "-w"], environment: environment)
        #expect(found.status == 0 && found.stdout == "kept\n" && !found.stderr.contains("rollback counter"), "\(found)")
    }

    @Test(
        "with NV full (as systemd's NvPCRs leave some chips), set-passcode fails saying TPM_RC_NV_SPACE and what to free; nothing stored is lost"
    )
    func passcodeWithNVFull() throws {
        let simulator = try SoftwareTPM.start()
        defer { simulator.stop() }
        let directory = try makeScratchDirectory("nv-full-passcode")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = directory + "/keychain"
        let environment: [String: String?] = [
            "TPM_KEYCHAIN_TCTI": simulator.tcti, "XDG_STATE_HOME": directory + "/state",
        ]
        let added = try CLI.run(
            ["add-generic-password", "--keychain", store, "-s", "svc", "-a", "a", "-w", "kept"],
            environment: environment)
        #expect(added.status == 0, "\(added)")
        // Filled after the store has its counter: only the device's indices find no room.
        let fillers = try NVMemory.fill(tcti: simulator.tcti)
        let refused = try CLI.run(
            ["set-passcode", "--keychain", store, "--passcode-fd", "0"], environment: environment,
            stdin: Data("a passcode 1234\n".utf8))
        #expect(refused.status != 0, "\(refused)")
        #expect(refused.stderr.contains("no room for another NV index (TPM_RC_NV_SPACE)"), "\(refused)")
        #expect(refused.stderr.contains("tpm2_getcap handles-nv-index"), "\(refused)")
        let found = try CLI.run(
            ["find-generic-password", "--keychain", store, "-s", "svc", "-a", "a", "-w"], environment: environment)
        #expect(found.status == 0 && found.stdout == "kept\n", "\(found)")
        // Room made, as the message says: the passcode is set.
        try NVMemory.release(fillers, tcti: simulator.tcti)
        let set = try CLI.run(
            ["set-passcode", "--keychain", store, "--passcode-fd", "0"], environment: environment,
            stdin: Data("a passcode 1234\n".utf8))
        #expect(set.status == 0, "\(set)")
    }

    @Test(
        "the owner password can come from a file no other user can read (TPM_KEYCHAIN_OWNER_AUTH_FILE); a file others can read, a link or a missing file stops the command with 77, saying why"
    )
    func ownerPasswordFromAFile() throws {
        let simulator = try SoftwareTPM.start()
        defer { simulator.stop() }
        let password = "owner password from a file"
        let changed = try TPM2Tools.run(["tpm2_changeauth", "-c", "owner", password], tcti: simulator.tcti)
        #expect(changed.status == 0, "\(changed.errorOutput)")
        let directory = try makeScratchDirectory("owner-file")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let file = directory + "/owner-password"
        #expect(
            FileManager.default.createFile(
                atPath: file, contents: Data((password + "\n").utf8), attributes: [.posixPermissions: 0o600]))
        let store = directory + "/keychain"
        func add(_ account: String, passwordFile: String?) throws -> CLIResult {
            try CLI.run(
                ["add-generic-password", "--keychain", store, "-s", "svc", "-a", account],
                environment: [
                    "TPM_KEYCHAIN_TCTI": simulator.tcti, "TPM_KEYCHAIN_OWNER_AUTH": nil,
                    "TPM_KEYCHAIN_OWNER_AUTH_FILE": passwordFile,
                ], stdin: Data("value\n".utf8))
        }
        let without = try add("a", passwordFile: nil)
        #expect(without.status == 77 && without.stderr.contains("TPM_KEYCHAIN_OWNER_AUTH_FILE"), "\(without)")
        try add("a", passwordFile: file).expectSuccess()
        #expect(
            try CLI.run(
                ["find-generic-password", "--keychain", store, "-s", "svc", "-a", "a", "-w"],
                environment: ["TPM_KEYCHAIN_TCTI": simulator.tcti]
            ).stdout == "value\n")

        #expect(chmod(file, 0o644) == 0)
        let readable = try add("b", passwordFile: file)
        #expect(readable.status == 77 && readable.stderr.contains("other users can read"), "\(readable)")
        #expect(chmod(file, 0o600) == 0 && symlink(file, directory + "/link") == 0)
        let link = try add("b", passwordFile: directory + "/link")
        #expect(link.status == 77 && link.stderr.contains("symbolic link"), "\(link)")
        let missing = try add("b", passwordFile: directory + "/missing")
        #expect(missing.status == 77 && missing.stderr.contains("No such file"), "\(missing)")
    }

    @Test("an unreachable TPM is a clear error with exit 69")
    func unreachableTPM() throws {
        let fixture = try CLIFixture()
        let unreachable = "swtpm:host=127.0.0.1,port=1"
        for verb in [["add-generic-password", "-s", "svc", "-a", "a", "-w", "b"], ["tpm-status"]] {
            let result = try CLI.run(
                [verb[0], "--keychain", fixture.store] + verb.dropFirst(),
                environment: fixture.environment.merging(["TPM_KEYCHAIN_TCTI": unreachable]) { $1 })
            #expect(result.status == 69, "\(result)")
            #expect(result.stderr.contains("No TPM answered at '\(unreachable)' (from TPM_KEYCHAIN_TCTI)"), "\(result)")
            #expect(result.stdout.isEmpty)
            #expect(
                !FileManager.default.fileExists(atPath: fixture.store),
                "a failed first open left \(fixture.store) behind")
        }
    }
}

/// The default a user gets with no TPM_KEYCHAIN_TCTI: the hardware TPM, or else a swtpm started
/// by the CLI with its state inside the store.
@Suite("embedded default TPM")
struct EmbeddedSimulatorTests {
    static let hardwareIsUsable = access("/dev/tpmrm0", R_OK | W_OK) == 0

    /// No TPM_KEYCHAIN_TCTI; a private XDG data directory.
    static func environment(_ directory: String) -> [String: String?] {
        ["TPM_KEYCHAIN_TCTI": nil, "XDG_DATA_HOME": directory + "/xdg-data"]
    }

    @Test(
        "each command resumes the store's simulated TPM rather than rebooting it: an unlock lasts into the next commands until lock-keychain, and a lock does too"
    )
    func lockStateLastsAcrossCommands() throws {
        guard !Self.hardwareIsUsable else { return }
        let directory = try makeScratchDirectory("embedded-lock")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = directory + "/keychain"
        let environment = Self.environment(directory)
        func run(_ arguments: String..., stdin: String? = nil) throws -> CLIResult {
            try CLI.run(
                [arguments[0], "--keychain", store] + arguments.dropFirst(), environment: environment,
                stdin: stdin.map { Data($0.utf8) })
        }
        #expect(try run("set-passcode", "--passcode-fd", "0", stdin: "embedded passcode\n").status == 0)
        let added = try run(
            "add-generic-password", "-s", "svc", "-a", "bound", "--accessible", "whenUnlocked", "-w", "v")
        #expect(added.status == 0, "\(added)")
        #expect(try run("find-generic-password", "-s", "svc", "-a", "bound", "-w").stdout == "v\n")
        #expect(try run("lock-keychain").status == 0)
        let locked = try run("find-generic-password", "-s", "svc", "-a", "bound", "-w")
        #expect(locked.status == 77 && locked.stdout.isEmpty, "\(locked)")
        #expect(try run("unlock-keychain", "--passcode-fd", "0", stdin: "embedded passcode\n").status == 0)
        for _ in 0..<2 {
            let found = try run("find-generic-password", "-s", "svc", "-a", "bound", "-w")
            #expect(found.status == 0 && found.stdout == "v\n", "\(found)")
        }
        #expect(try runningSimulators().filter { $0.contains(store) }.isEmpty, "no simulator outlives its command")
    }

    @Test("add then find in two processes share the simulated TPM kept in <store>/swtpm, which never outlives them")
    func persistsAcrossProcesses() throws {
        let directory = try makeScratchDirectory("embedded")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = directory + "/nested/keychain"
        let environment = Self.environment(directory)

        let added = try CLI.run(
            ["add-generic-password", "--keychain", store, "-s", "svc", "-a", "alice", "-w", "persisted"],
            environment: environment)
        #expect(added.status == 0, "\(added)")
        let found = try CLI.run(
            ["find-generic-password", "--keychain", store, "-s", "svc", "-a", "alice", "-w"], environment: environment)
        #expect(found.status == 0, "\(found)")
        #expect(found.stdout == "persisted\n")
        // A failing command stops its simulator too.
        let duplicate = try CLI.run(
            ["add-generic-password", "--keychain", store, "-s", "svc", "-a", "alice", "-w", "again"],
            environment: environment)
        #expect(duplicate.status == 45, "\(duplicate)")
        #expect(duplicate.lastErrorLine == SecurityMessages.duplicateItem)

        let status = try CLI.run(["tpm-status", "--keychain", store], environment: environment)
        #expect(status.status == 0, "\(status)")
        if Self.hardwareIsUsable {
            #expect(status.stdout.contains("hardware TPM at device:/dev/tpmrm0"), "\(status)")
        } else {
            #expect(added.stderr.contains("SIMULATED"), "\(added)")
            #expect(status.stdout.contains("SIMULATED"), "\(status)")
            #expect(status.stdout.contains("state in \(store)/swtpm"), "\(status)")
            #expect(FileManager.default.fileExists(atPath: store + "/swtpm"))
            #expect(permissions(store) == 0o700)
            #expect(permissions(directory + "/nested") == 0o700)
        }
        let leftovers = try runningSimulators().filter { $0.contains(store) }
        #expect(leftovers.isEmpty, "swtpm still running: \(leftovers)")
    }

    @Test(
        "runs on the embedded simulator leave no TPM lock file behind: each simulator's lock lives and goes with its socket directory"
    )
    func simulatorRunsLeaveNoLockFiles() throws {
        let directory = try makeScratchDirectory("embedded-locks")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let runtime = directory + "/runtime"
        #expect(mkdir(runtime, 0o700) == 0)
        var environment = Self.environment(directory)
        environment["XDG_RUNTIME_DIR"] = runtime
        let store = directory + "/keychain"
        let added = try CLI.run(
            ["add-generic-password", "--keychain", store, "-s", "svc", "-a", "alice", "-w", "v"],
            environment: environment)
        #expect(added.status == 0, "\(added)")
        for _ in 0..<2 {
            let found = try CLI.run(
                ["find-generic-password", "--keychain", store, "-s", "svc", "-a", "alice", "-w"],
                environment: environment)
            #expect(found.stdout == "v\n", "\(found)")
        }
        guard !Self.hardwareIsUsable else { return }
        #expect(added.stderr.contains("SIMULATED"), "\(added)")
        let locks = (try? FileManager.default.contentsOfDirectory(atPath: runtime + "/tpm-keychain")) ?? []
        #expect(locks.filter { $0.hasPrefix("tcti-") }.isEmpty, "\(locks)")
    }

    @Test(
        "a swtpm/ directory that appears in a store made on a TPM device is never started in its place: the command fails naming it, and the planted state stays untouched"
    )
    func plantedSimulatorInADeviceStore() throws {
        let directory = try makeScratchDirectory("planted-simulator")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let simulator = try SoftwareTPM.start()
        defer { simulator.stop() }
        let store = directory + "/keychain"
        // A store made on the machine's TPM device, as tpm-keychain makes it where there is one
        // (a swtpm stands in for that device here: store.meta records what it is told).
        let identity = try ItemIdentity(accessGroup: "", service: "svc", account: "a")
        let device = TPMConfiguration(tcti: simulator.tcti)
        try {
            let opened = try ItemStore.open(at: store, tpm: device, tpmKind: .device)
            defer { opened.close() }
            try opened.write(
                identity, mode: .add, value: ItemValue(kind: .data, bytes: Array("made on the device".utf8)),
                changes: AttributeChanges())
        }()
        // Someone puts a simulator state of their making in it (as this user: it passes every ownership check).
        try FileManager.default.createDirectory(
            atPath: store + "/swtpm", withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])

        let found = try CLI.run(
            ["find-generic-password", "--keychain", store, "-s", "svc", "-a", "a", "-w"],
            environment: Self.environment(directory))
        #expect(found.status != 0 && !found.stdout.contains("made on the device"), "\(found)")
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: store + "/swtpm").isEmpty,
            "the planted simulator was started")
        if !Self.hardwareIsUsable {
            #expect(
                found.status == 69 && found.stderr.contains("created on a TPM device")
                    && found.stderr.contains("swtpm/"), "\(found)")
        }
        let reopened = try ItemStore.open(at: store, tpm: device, create: false, tpmKind: .device)
        defer { reopened.close() }
        #expect(try reopened.value(identity)?.bytes == Array("made on the device".utf8))
    }

    @Test("concurrent invocations on one store take turns with its simulator and all succeed")
    func concurrentInvocations() throws {
        let directory = try makeScratchDirectory("concurrent")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = directory + "/keychain"
        let environment = Self.environment(directory)
        let accounts = ["first", "second", "third"]
        let running = try accounts.map {
            try CLI.start(
                ["add-generic-password", "--keychain", store, "-s", "svc", "-a", $0, "-w", "password-\($0)"],
                environment: environment, stdinPipe: false)
        }
        for result in try running.map({ try $0.finish() }) {
            #expect(result.status == 0, "\(result)")
        }
        let readers = try accounts.map {
            try CLI.start(
                ["find-generic-password", "--keychain", store, "-s", "svc", "-a", $0, "-w"],
                environment: environment, stdinPipe: false)
        }
        for (account, result) in zip(accounts, try readers.map { try $0.finish() }) {
            #expect(result.status == 0, "\(result)")
            #expect(result.stdout == "password-\(account)\n")
        }
        #expect(try runningSimulators().filter { $0.contains(store) }.isEmpty)
    }

    @Test("demo runs twice in a row on the embedded default and cleans up after itself")
    func demoTwice() throws {
        let directory = try makeScratchDirectory("demo")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let environment = Self.environment(directory)
        let demoStore = directory + "/xdg-data/tpm-keychain/demo"
        for run in 1...2 {
            let result = try CLI.run(["demo"], environment: environment)
            #expect(result.status == 0, "\(result)")
            #expect(result.stdout.contains(run == 1 ? "create store:" : "open store:"), "\(result)")
            #expect(result.stdout.contains("$ tpm-keychain find-generic-password --keychain \"$STORE\""))
            #expect(result.stdout.contains("correct horse battery staple    (the public demo value"))
            #expect(result.stdout.contains("password has been deleted."))
            #expect(result.stdout.contains("store:        \(demoStore)"))
            #expect(result.stdout.contains(Self.hardwareIsUsable ? "hardware TPM" : "SIMULATED"))
        }
        // The demo item is gone: an empty dump.
        let dump = try CLI.run(["dump-keychain", "--keychain", demoStore], environment: environment)
        #expect(dump.status == 0 && dump.stdout.isEmpty, "\(dump)")
    }

    @Test(
        "the shipped tool carries no test support: the demo's simulated face is its own, and no symbol of TPMKeychainTesting is in the binary"
    )
    func noTestSupportInTheTool() throws {
        let binary = try Data(contentsOf: URL(fileURLWithPath: CLI.executable))
        #expect(binary.range(of: Data("TPMKeychainTesting".utf8)) == nil)
        #expect(binary.range(of: Data("SimulatedAuthenticator".utf8)) == nil)
    }

    @Test("the embedded simulator listens on a Unix socket in a private directory, removed afterwards; no TCP port")
    func embeddedSimulatorUsesAUnixSocket() throws {
        guard !Self.hardwareIsUsable else { return }
        let directory = try makeScratchDirectory("embedded-socket")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = directory + "/keychain"
        let status = try CLI.run(["tpm-status", "--keychain", store], environment: Self.environment(directory))
        #expect(status.status == 0, "\(status)")
        let tcti = try #require(status.stdout.split(separator: "\n").first { $0.hasPrefix("tcti:") }).dropFirst(
            "tcti:".count
        )
        .trimmingCharacters(in: .whitespaces)
        #expect(tcti.hasPrefix("swtpm:path=/"), "\(status)")
        let socketDirectory = ((tcti.dropFirst("swtpm:path=".count)) as NSString).deletingLastPathComponent
        #expect(!FileManager.default.fileExists(atPath: socketDirectory), "the socket directory outlived the command")
    }

    @Test("an interrupted command stops its embedded simulator, in order, and nothing it was doing is half-done")
    func interruptStopsTheEmbeddedSimulator() throws {
        guard !Self.hardwareIsUsable else { return }
        let directory = try makeScratchDirectory("embedded-interrupt")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = directory + "/keychain"
        let environment = Self.environment(directory)
        let added = try CLI.run(
            ["add-generic-password", "--keychain", store, "-s", "svc", "-a", "alice", "-w", "old"],
            environment: environment)
        #expect(added.status == 0, "\(added)")
        // Hold the service's lock, so the next writer waits with its simulator running.
        let lockPath = try #require(regularFiles(under: store + "/items2").first { $0.hasSuffix("/.lock") })
        let holder = open(lockPath, O_RDWR | O_CLOEXEC)
        defer { close(holder) }
        #expect(flock(holder, LOCK_EX) == 0)

        for interruption in [SIGINT, SIGTERM] {
            let running = try CLI.start(
                ["add-generic-password", "--keychain", store, "-s", "svc", "-a", "alice", "-w", "new", "-U"],
                environment: environment, stdinPipe: false)
            let deadline = ContinuousClock.now + .seconds(15)
            while try runningSimulators().filter({ $0.contains(store) }).isEmpty && ContinuousClock.now < deadline {
                usleep(20_000)
            }
            #expect(try !runningSimulators().filter { $0.contains(store) }.isEmpty, "the simulator never started")
            usleep(500_000) // the store is open and the writer waits for the lock
            #expect(kill(running.processIdentifier, interruption) == 0)
            let result = try running.finish()
            #expect(result.killedBySignal && result.status == interruption, "\(result)")
            #expect(
                try runningSimulators().filter { $0.contains(store) }.isEmpty, "swtpm outlived the interrupted command")
        }
        flock(holder, LOCK_UN)
        let found = try CLI.run(
            ["find-generic-password", "--keychain", store, "-s", "svc", "-a", "alice", "-w"], environment: environment)
        #expect(found.stdout == "old\n", "\(found)")
        let status = try CLI.run(["tpm-status", "--keychain", store], environment: environment)
        #expect(status.stdout.contains("lockout counter:   0 failed authorizations (not in lockout)"), "\(status)")
    }

    @Test("reset-lockout ends a lockout of the embedded simulated TPM; items without a PIN stay readable during it")
    func resetLockoutOfTheEmbeddedTPM() throws {
        guard !Self.hardwareIsUsable else { return }
        let directory = try makeScratchDirectory("embedded-lockout")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = directory + "/keychain"
        let environment = Self.environment(directory)
        #expect(
            try CLI.run(
                ["add-generic-password", "--keychain", store, "-s", "svc", "-a", "alice", "-w", "x"],
                environment: environment
            ).status == 0)

        // Lock the store's simulated TPM out with wrong PINs on an object of its own.
        do {
            let simulator = try SoftwareTPM.start(.init(stateDirectory: store + "/swtpm"))
            defer { simulator.stop() }
            try simulator.setDictionaryAttackParameters(maxTries: 2, recoveryTime: 1000, lockoutRecovery: 1000)
            let tpm = try TPMConnection(TPMConfiguration(tcti: simulator.tcti))
            defer { tpm.close() }
            let sealed = try tpm.seal(
                SecretBytes(copying: [1, 2, 3]), authValue: SecretBytes(copying: Array("right".utf8)))
            for _ in 0..<3 { _ = try? tpm.unseal(sealed, authValue: SecretBytes(copying: Array("wrong".utf8))) }
            #expect(try tpm.dictionaryAttackStatus().inLockout)
        }
        let locked = try CLI.run(["tpm-status", "--keychain", store], environment: environment)
        #expect(locked.stdout.contains("IN LOCKOUT"), "\(locked)")
        // The master key carries no secret, so it is noDA: the lockout does not touch the store.
        let found = try CLI.run(
            ["find-generic-password", "--keychain", store, "-s", "svc", "-a", "alice", "-w"], environment: environment)
        #expect(found.stdout == "x\n", "\(found)")

        let reset = try CLI.run(["reset-lockout", "--keychain", store], environment: environment)
        #expect(reset.status == 0, "\(reset)")
        #expect(reset.stdout.contains("IN LOCKOUT"), "\(reset)")
        #expect(reset.stdout.contains("after:   0 failed authorizations\n"), "\(reset)")
        let after = try CLI.run(["tpm-status", "--keychain", store], environment: environment)
        #expect(after.stdout.contains("(not in lockout)"), "\(after)")

        // Never a new simulated TPM just to reset it: no TPM (69), and nothing created.
        let noStore = try CLI.run(["reset-lockout", "--keychain", directory + "/elsewhere"], environment: environment)
        #expect(noStore.status == 69, "\(noStore)")
        #expect(noStore.lastErrorLine.contains("No TPM for the keychain"), "\(noStore)")
        #expect(!FileManager.default.fileExists(atPath: directory + "/elsewhere"))
    }

    @Test(
        "a store the CLI created on its simulated TPM opens from Swift with the default policy, and says it is simulated"
    )
    func libraryOpensTheCLIsSimulatedStore() throws {
        guard !Self.hardwareIsUsable, TPMConfiguration.environmentTCTI == nil else { return }
        let directory = try makeScratchDirectory("shared-policy")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = directory + "/keychain"
        let added = try CLI.run(
            ["add-generic-password", "--keychain", store, "-s", "svc", "-a", "alice", "-w", "from the CLI"],
            environment: Self.environment(directory))
        #expect(added.status == 0, "\(added)")

        let location = try KeychainLocation(path: store)
        defer { Keychain.closeStore(location) }
        #expect(try Keychain(service: "svc", location: location).string(forKey: "alice") == "from the CLI")
        let tpm = try StoreTPM.choose(for: location)
        defer { tpm.stop() }
        #expect(tpm.isSimulated)
        #expect(tpm.summary.hasPrefix("SIMULATED"))
        #expect(
            try runningSimulators().filter { $0.contains(store) }.count == 1, "the store's simulator runs while chosen")
        tpm.stop()
        #expect(
            try runningSimulators().filter { $0.contains(store) }.isEmpty,
            "the library stops the simulator after the open")
    }

    @Test(
        "a store with a simulated TPM of its own, a device passcode set: a lock-bound item's first write in a process opens the device and the store on the one simulator, and waits for nothing"
    )
    func ownSimulatorSharedByDeviceAndStore() async throws {
        guard !Self.hardwareIsUsable, TPMConfiguration.environmentTCTI == nil else { return }
        let directory = try makeScratchDirectory("own-simulator-device")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let location = try KeychainLocation(path: directory + "/keychain", tpm: .automaticOrSimulated)
        defer { Keychain.closeStore(location) }
        try KeychainDevice(location: location).setPasscode(SecretBytes(copying: Array("owner passcode".utf8)))
        // A new handle, whose first write starts its epoch on the store's TPM from inside the device's.
        Keychain.closeStore(location)
        let keychain = try Keychain(service: "svc", location: location)
        try await keychain.set("bound", forKey: "k", accessControl: AccessControl(.whenUnlocked))
        #expect(try keychain.accessControl(forKey: "k")?.accessibility == .whenUnlocked)
        #expect(try runningSimulators().filter { $0.contains(directory) }.isEmpty, "stopped once nothing uses it")
    }

    @Test("without any TPM the library refuses to create a store unless asked for a simulated one, and creates nothing")
    func libraryNeedsConsentForASimulatedTPM() throws {
        guard !Self.hardwareIsUsable, TPMConfiguration.environmentTCTI == nil else { return }
        let directory = try makeScratchDirectory("consent")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let automatic = try KeychainLocation(path: directory + "/keychain")
        do {
            try Keychain(service: "svc", location: automatic).set("v", forKey: "k")
            Issue.record("a store was created without a TPM")
        } catch {
            #expect(error.code == .tpmUnavailable)
            #expect(error.message.contains(".automaticOrSimulated"), "\(error)")
        }
        #expect(!FileManager.default.fileExists(atPath: directory + "/keychain"))

        let simulated = automatic.with(tpm: .automaticOrSimulated)
        defer { Keychain.closeStore(simulated) }
        try Keychain(service: "svc", location: simulated).set("v", forKey: "k")
        Keychain.closeStore(simulated)
        // Created with a simulated TPM, the store is found again by the automatic policy.
        #expect(try Keychain(service: "svc", location: automatic).string(forKey: "k") == "v")
        Keychain.closeStore(automatic)
    }
}

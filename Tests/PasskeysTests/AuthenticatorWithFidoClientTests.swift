import Foundation
import KeychainStore
import SystemCalls
import TPMKeychain
import TPMKeychainTesting
import Testing
import WireFormat

#if canImport(Glibc)
import Glibc
#endif

/// The authenticator binary over a store on a private swtpm, driven by python-fido2 (its own
/// Fido2Client, ClientPin and CredentialManagement) over the socket, with py_webauthn verifying
/// every registration and assertion as a relying party would; hostile input sent raw.
@Suite("the passkey authenticator with python-fido2 and py_webauthn", .serialized)
struct AuthenticatorWithFidoClientTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
    static let python = root.appendingPathComponent(".build/passkeys-venv/bin/python").path
    static let client = root.appendingPathComponent("Fixtures/passkeys/fido_client.py").path
    static let raw = root.appendingPathComponent("Fixtures/passkeys/raw_frames.py").path

    static func tool(_ name: String) -> String {
        let bundle =
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        return URL(fileURLWithPath: bundle).deletingLastPathComponent().appendingPathComponent(name).path
    }

    final class Fixture {
        let simulator: SoftwareTPM
        let directory: String
        let socket: String
        var server: Process?
        var store: String { directory + "/default" }
        var questions: String { directory + "/questions" }

        init() throws {
            #expect(
                FileManager.default.isExecutableFile(atPath: AuthenticatorWithFidoClientTests.python),
                "python-fido2's venv: run .ci/install-dependencies")
            simulator = try SoftwareTPM.start()
            directory = NSTemporaryDirectory() + "tpm-keychain-passkeys-" + UUID().uuidString
            try FileManager.default.createDirectory(
                atPath: directory, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
            socket = directory + "/passkeys.socket"
            let created = try run(AuthenticatorWithFidoClientTests.tool("tpm-keychain"), ["create-keychain", store])
            #expect(created.status == 0, "\(created)")
            // As an owner would set the TPM's lockout for a PIN of 8 tries: 32 failures before
            // lockout, so that CTAP's count, not the TPM's, blocks first.
            let lockout = try TPM2Tools.run(
                [
                    "tpm2_dictionarylockout", "--setup-parameters", "--max-tries=32", "--recovery-time=600",
                    "--lockout-recovery-time=600",
                ], tcti: simulator.tcti)
            #expect(lockout.status == 0, "\(lockout.errorOutput)")
            try start()
        }

        var environment: [String: String] {
            var environment = ProcessInfo.processInfo.environment
            environment["TPM_KEYCHAIN_TCTI"] = simulator.tcti
            environment["XDG_STATE_HOME"] = directory + "/xdg-state"
            environment["XDG_DATA_HOME"] = directory + "/xdg-data"
            return environment
        }

        /// Given to the authenticator after its store, socket and presence command.
        var extraArguments: [String] = []

        /// Starts the authenticator; its presence command says yes and keeps each question.
        func start() throws {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: AuthenticatorWithFidoClientTests.tool("tpm-keychain-passkeys"))
            process.arguments =
                [
                    "--keychain", store, "--socket", socket, "--presence-command",
                    "printf '%s\\n' \"$TPM_KEYCHAIN_PROMPT_REASON\" >> '\(questions)'",
                ] + extraArguments
            process.environment = environment
            let output = directory + "/server-\(UUID().uuidString).out"
            _ = FileManager.default.createFile(atPath: output, contents: nil)
            process.standardOutput = FileHandle(forWritingAtPath: output)
            let errors = directory + "/server.err"
            if !FileManager.default.fileExists(atPath: errors) {
                _ = FileManager.default.createFile(atPath: errors, contents: nil)
            }
            let handle = FileHandle(forWritingAtPath: errors)
            handle?.seekToEndOfFile()
            process.standardError = handle
            try process.run()
            server = process
            let deadline = ContinuousClock.now + .seconds(120)
            while !((try? String(contentsOfFile: output, encoding: .utf8)) ?? "").contains("SOCKET=") {
                guard process.isRunning, ContinuousClock.now < deadline else {
                    throw FixtureError("the authenticator did not start: \(errors)")
                }
                usleep(20_000)
            }
        }

        /// Stops the authenticator with SIGTERM: CTAP's power cycle.
        func stop() {
            guard let server, server.isRunning else { return }
            kill(server.processIdentifier, SIGTERM)
            server.waitUntilExit()
        }

        var errors: String { (try? String(contentsOfFile: directory + "/server.err", encoding: .utf8)) ?? "" }

        deinit {
            stop()
            simulator.stop()
            try? FileManager.default.removeItem(atPath: directory)
        }

        func run(
            _ executable: String, _ arguments: [String], stdin: String? = nil
        ) throws -> (status: Int32, output: String) {
            let process = Process()
            let output = directory + "/run-\(UUID().uuidString).out"
            _ = FileManager.default.createFile(atPath: output, contents: nil)
            defer { try? FileManager.default.removeItem(atPath: output) }
            process.executableURL = URL(fileURLWithPath: executable)
            process.arguments = arguments
            process.environment = environment
            process.standardOutput = FileHandle(forWritingAtPath: output)
            process.standardError = FileHandle(forWritingAtPath: output)
            let input = Pipe()
            process.standardInput = stdin == nil ? FileHandle.nullDevice : input
            try process.run()
            if let stdin {
                input.fileHandleForWriting.write(Data(stdin.utf8))
                try input.fileHandleForWriting.close()
            }
            process.waitUntilExit()
            return (process.terminationStatus, (try? String(contentsOfFile: output, encoding: .utf8)) ?? "")
        }

        /// fido_client.py in `mode`; its last line, as JSON.
        func client(
            _ arguments: [String], script: String = AuthenticatorWithFidoClientTests.client
        ) throws -> [String: Any] {
            let result = try run(AuthenticatorWithFidoClientTests.python, [script, socket] + arguments)
            let last = result.output.split(separator: "\n").last.map(String.init) ?? ""
            guard result.status == 0,
                let object = try? JSONSerialization.jsonObject(with: Data(last.utf8)) as? [String: Any]
            else { throw FixtureError("\(arguments) failed (\(result.status)): \(result.output)\n\(errors)") }
            return object
        }

        /// The TPM's dictionary-attack failure count (TPM2_PT_LOCKOUT_COUNTER).
        func lockoutCounter() throws -> Int {
            let result = try TPM2Tools.run(["tpm2_getcap", "properties-variable"], tcti: simulator.tcti)
            guard
                let line = result.output.split(separator: "\n").first(where: { $0.contains("TPM2_PT_LOCKOUT_COUNTER") }
                ),
                let value = line.split(separator: "x").last.flatMap({
                    Int($0.trimmingCharacters(in: .whitespaces), radix: 16)
                })
            else { throw FixtureError("no lockout counter in \(result.output)") }
            return value
        }
    }

    struct FixtureError: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }

    @Test(
        "10 discoverable passkeys registered and 10 sign-ins, each verified by py_webauthn with its sign count rising; found without an allow list by user handle; the person is asked, naming the site and the program"
    )
    func registerAndSignIn() throws {
        let fixture = try Fixture()
        let info = try fixture.client(["info"])
        #expect((info["versions"] as? [String])?.contains("FIDO_2_1") == true, "\(info)")
        #expect((info["pin_protocols"] as? [Int]) == [2])

        let kept = fixture.directory + "/registered.json"
        let outcome = try fixture.client(["register-and-assert", "10", "", kept])
        let registered = try #require(outcome["registered"] as? [[String: Any]])
        #expect(registered.count == 10)
        #expect(Set(registered.compactMap { $0["id"] as? String }).count == 10, "ten distinct credential IDs")
        #expect(registered.allSatisfy { $0["fmt"] as? String == "none" && $0["uv"] as? Bool == false })
        let asserted = try #require(outcome["asserted"] as? [[String: Any]])
        #expect(asserted.count == 10 && asserted.allSatisfy { ($0["sign_count"] as? Int ?? 0) > 0 })
        let discovered = try #require(outcome["discovered"] as? [[String: Any]])
        #expect(discovered.compactMap { $0["user_handle"] as? String } == ["user-0", "user-1"])

        let questions = (try? String(contentsOfFile: fixture.questions, encoding: .utf8)) ?? ""
        #expect(questions.contains("Create a passkey for \"example.com\" as \"user3@example.com\""), "\(questions)")
        #expect(questions.contains("Sign in to \"example.com\""))
        #expect(questions.contains("python"), "the program asking is named: \(questions)")

        // Restarted, the authenticator counts on past every count it handed out (py_webauthn
        // checks each new count against the last one it saw).
        fixture.stop()
        try fixture.start()
        let again = try fixture.client(["assert-again", kept])
        #expect((again["asserted"] as? [[String: Any]])?.count == 10, "\(again)")

        // One vocabulary: the credentials are the keychain's TPM key items.
        let keys = try fixture.run(Self.tool("tpm-keychain-keys"), ["list", "--keychain", fixture.store])
        #expect(keys.output.contains("example.com (user9@example.com)"), "\(keys.output)")
    }

    @Test(
        "the PIN: set, checked by the TPM, its tokens give UV; credential management lists and deletes; eight wrong PINs block it as CTAP says, with the TPM's lockout counter counting each; reset removes every credential and the PIN"
    )
    func pinManagementAndReset() throws {
        let fixture = try Fixture()
        #expect(try fixture.client(["set-pin", "4711"])["set"] as? Bool == true)
        let outcome = try fixture.client(["register-and-assert", "2", "4711"])
        let registered = try #require(outcome["registered"] as? [[String: Any]])
        #expect(registered.count == 2 && registered.allSatisfy { $0["uv"] as? Bool == true })

        // hmac-secret, as WebAuthn's PRF: the same salt gives the same secret, another salt another.
        let prf = try fixture.client(["prf", "4711"])
        #expect(prf["enabled"] as? Bool == true && prf["same"] as? Bool == true, "\(prf)")
        #expect(prf["different"] as? Bool == true)

        let renamed = try fixture.client(["manage", "4711", "rename-first"])
        #expect(renamed["renamed"] as? String == "renamed@example.com" && renamed["display"] as? String == "Renamed")
        let managed = try fixture.client(["manage", "4711", "delete-first"])
        #expect(managed["existing"] as? Int == 3 && managed["rps"] as? [String] == ["example.com"], "\(managed)")
        let remaining = try fixture.client(["manage", "4711"])
        #expect((remaining["credentials"] as? [String])?.count == 2)
        #expect((remaining["credentials"] as? [String])?.contains(managed["deleted"] as? String ?? "") == false)

        // Three wrong PINs in a row block until a power cycle (a restart); eight block for good.
        let before = try fixture.lockoutCounter()
        var errors: [String] = []
        for (round, tries) in [3, 3, 3].enumerated() {
            let wrong = try fixture.client(["wrong-pins", String(tries), "0000"])
            errors += wrong["errors"] as? [String] ?? []
            if round == 2 { #expect(wrong["retries"] as? Int == 0, "\(wrong)") }
            fixture.stop()
            try fixture.start()
        }
        #expect(
            errors == [
                "PIN_INVALID", "PIN_INVALID", "PIN_AUTH_BLOCKED", "PIN_INVALID", "PIN_INVALID", "PIN_AUTH_BLOCKED",
                "PIN_INVALID", "PIN_BLOCKED", "PIN_BLOCKED",
            ], "\(errors)")
        #expect(try fixture.lockoutCounter() - before == 8, "each wrong PIN was the TPM's refusal")
        let blocked = try fixture.client(["wrong-pins", "1", "4711"])
        #expect(blocked["errors"] as? [String] == ["PIN_BLOCKED"], "the right PIN does not unblock it")

        #expect(try fixture.client(["reset"])["reset"] as? Bool == true)
        let info = try fixture.client(["info"])
        #expect((info["options"] as? [String: Bool])?["clientPin"] == false, "\(info)")
        let keys = try fixture.run(Self.tool("tpm-keychain-keys"), ["list", "--keychain", fixture.store])
        #expect(!keys.output.contains("example.com"), "\(keys.output)")
        let again = try fixture.client(["register-and-assert", "1", ""])
        #expect((again["registered"] as? [[String: Any]])?.count == 1)
    }

    @Test(
        "the device passcode as built-in user verification: the right one verifies (UV), a wrong one is the TPM's refusal, counted by its lockout"
    )
    func passcodeVerification() throws {
        let fixture = try Fixture()
        let set = try fixture.run(
            Self.tool("tpm-keychain"), ["set-passcode", "--keychain", fixture.store, "--passcode-fd", "0"],
            stdin: "4711-correct-horse\n")
        #expect(set.status == 0, "\(set)")
        fixture.stop()
        fixture.extraArguments = ["--passcode-command", "printf 4711-correct-horse"]
        try fixture.start()
        let info = try fixture.client(["info"])
        #expect((info["options"] as? [String: Bool])?["uv"] == true, "\(info)")
        // The retry counts as libfido2 asks for them, with protocol 1: answered, not refused.
        let retries = try fixture.client(["retries"], script: Self.raw)
        #expect((retries["pin"] as? [Any])?.first as? Int == 0, "\(retries)")
        #expect(
            (retries["uv"] as? [Any])?.first as? Int == 0 && (retries["uv"] as? [Any])?.last as? String == "a10503",
            "\(retries)")
        let kept = fixture.directory + "/verified.json"
        #expect(try fixture.client(["uv-register", "uv", "passcode@example.com", kept])["uv"] as? Bool == true)
        #expect(try fixture.client(["uv-assert", kept])["signed"] as? Bool == true)

        fixture.stop()
        fixture.extraArguments = ["--passcode-command", "printf not-the-passcode"]
        try fixture.start()
        let before = try fixture.lockoutCounter()
        let wrong = try fixture.client(["uv-register", "uv", "wrong@example.com", fixture.directory + "/none.json"])
        #expect(wrong["error"] as? String == "UV_INVALID", "\(wrong) \(fixture.errors)")
        #expect(try fixture.lockoutCounter() == before + 1, "the wrong passcode was the TPM's refusal")
    }

    @Test(
        "each credential's key was made by the TPM and cannot leave it: fixedTPM, fixedParent, sensitiveDataOrigin, as tpm2_print reads its item and tpm2_readpublic asks the TPM"
    )
    func keysStayInTheTPM() throws {
        let fixture = try Fixture()
        _ = try fixture.client(["register-and-assert", "2", ""])
        // tpm2-tools load the keys below: the authenticator must not use the TPM's few object slots meanwhile.
        fixture.stop()
        // The TCG storage root key (provisioning guidance §7.5.1: ECC P-256, AES-128-CFB, zero-filled
        // unique), derived again by tpm2-tools: the parent each credential's key was made under.
        let tools = fixture.directory + "/tpm2-tools"
        try FileManager.default.createDirectory(atPath: tools, withIntermediateDirectories: false)
        let tcti = fixture.simulator.tcti
        // From standard input, tpm2-tools split the bytes into x and y: 32 zero bytes each.
        let primary = try TPM2Tools.run(
            [
                "tpm2_createprimary", "-C", "o", "-g", "sha256", "-G", "ecc256:null:aes128cfb", "-a",
                "fixedtpm|fixedparent|sensitivedataorigin|userwithauth|noda|restricted|decrypt", "-u", "-",
                "-c", tools + "/parent.ctx",
            ], tcti: tcti, input: [UInt8](repeating: 0, count: 64))
        #expect(primary.status == 0, "\(primary.errorOutput)")
        // Without a resource manager, what tpm2-tools load stays loaded: each run's objects are flushed.
        let flush = { _ = try? TPM2Tools.run(["tpm2_flushcontext", "-t"], tcti: tcti) }
        flush()
        let parent = try TPM2Tools.run(["tpm2_readpublic", "-c", tools + "/parent.ctx"], tcti: tcti)
        flush()
        let location = try KeychainLocation(path: fixture.store, tcti: fixture.simulator.tcti)
        let service = try ItemService(location: location, caller: AccessCaller(face: .cli))
        var matching = AttributeList()
        matching[AttributeTag.applicationTag] = Array("passkey".utf8)
        let items = try service.query(ItemQuery(itemClass: .key, matching: matching, returnsData: true))
        #expect(items.count == 2)
        for item in items {
            let value = try TPMKeyValue(parsing: try #require(item.value))
            let file = fixture.directory + "/public-\(UUID().uuidString)"
            let area = value.key.publicArea
            let declared = area.count >= 2 ? Int(area[0]) << 8 | Int(area[1]) : -1
            let prefix: [UInt8] = [UInt8(area.count >> 8), UInt8(area.count & 0xFF)]
            let sized: [UInt8] = declared == area.count - 2 ? area : prefix + area
            try Data(sized).write(to: URL(fileURLWithPath: file))
            let printed = try TPM2Tools.run(["tpm2_print", "-t", "TPM2B_PUBLIC", file], tcti: fixture.simulator.tcti)
            #expect(printed.status == 0, "\(printed.errorOutput)")
            for attribute in ["fixedtpm", "fixedparent", "sensitivedataorigin", "sign"] {
                #expect(printed.output.contains(attribute), "\(attribute): \(printed.output)")
            }
            #expect(printed.output.contains("ecc") || printed.output.contains("ECC"))

            // The TPM itself: the key loads only under the parent it was made under (its private
            // area is sealed to that parent), and the TPM reports what it holds.
            #expect(parent.output.contains("name: " + value.key.storageKeyName.hexString), "\(parent.output)")
            try Data(value.key.privateArea).write(to: URL(fileURLWithPath: file + ".private"))
            let loaded = try TPM2Tools.run(
                ["tpm2_load", "-C", tools + "/parent.ctx", "-u", file, "-r", file + ".private", "-c", file + ".ctx"],
                tcti: tcti)
            #expect(loaded.status == 0, "\(loaded.errorOutput)")
            flush()
            let read = try TPM2Tools.run(["tpm2_readpublic", "-c", file + ".ctx"], tcti: tcti)
            flush()
            #expect(read.status == 0, "\(read.errorOutput)")
            let attributes = read.output.split(separator: "\n").drop { !$0.hasPrefix("attributes:") }.prefix(2)
                .joined(separator: " ")
            for attribute in ["fixedtpm", "fixedparent", "sensitivedataorigin", "sign"] {
                #expect(attributes.contains(attribute), "\(attribute): \(read.output)")
            }
            #expect(!attributes.contains("decrypt"), "a signing key only: \(read.output)")
        }
    }

    @Test(
        "hostile clients: malformed CBOR, wrong and broadcast channels, interleaved channels, a sequence out of order, an oversized length, 1,000 random reports and a client that hangs up mid-message get CTAP's errors; nothing crashes and no credential is lost; another user is refused",
        .enabled(if: geteuid() == 0, "needs root: the test creates a second user with useradd"))
    func hostileClients() throws {
        let fixture = try Fixture()
        _ = try fixture.client(["register-and-assert", "3", ""])
        let malformed = try fixture.client(["malformed"], script: Self.raw)
        #expect(malformed["not_cbor"] as? String == "12" && malformed["not_a_map"] as? String == "12", "\(malformed)")
        #expect(malformed["missing"] as? String == "14" && malformed["unknown_command"] as? String == "01")
        #expect(malformed["truncated"] as? String == "12" && malformed["huge_array"] as? String == "12")
        let frames = try fixture.client(["frames"], script: Self.raw)
        #expect((frames["unknown_channel"] as? [Any])?.last as? Int == 11, "\(frames)")
        #expect((frames["broadcast_ping"] as? [Any])?.last as? Int == 11)
        #expect((frames["oversized"] as? [Any])?.last as? Int == 3)
        #expect((frames["interleaved"] as? [Any])?.last as? Int == 6)
        #expect((frames["sequence"] as? [Any])?.last as? Int == 4)
        #expect(frames["ping_after"] as? Bool == true)
        let random = try fixture.client(["random", "47"], script: Self.raw)
        #expect(random["ping_after"] as? Bool == true && random["marker_answered"] as? Bool == true, "\(random)")
        let hangup = try fixture.client(["hangup"], script: Self.raw)
        #expect(hangup["ping_after"] as? Bool == true)
        #expect(fixture.server?.isRunning == true, "still serving: \(fixture.errors)")
        // Nothing lost: the three credentials still sign in.
        let after = try fixture.client(["register-and-assert", "0", ""])
        #expect((after["registered"] as? [[String: Any]])?.isEmpty == true)
        let keys = try fixture.run(Self.tool("tpm-keychain-keys"), ["list", "--keychain", fixture.store])
        #expect(keys.output.components(separatedBy: "example.com (user").count == 4, "\(keys.output)")

        let user = "tkfd" + String(UInt32.random(in: 0...UInt32.max), radix: 36)
        let add = try fixture.run("/usr/sbin/useradd", ["-M", "-N", "-s", "/usr/sbin/nologin", user])
        #expect(add.status == 0, "\(add)")
        defer { _ = try? fixture.run("/usr/sbin/userdel", [user]) }
        // The socket is the owner's (0600 in a 0700 directory): opened for the stranger with a
        // descriptor it inherits, the authenticator still sees its uid and hangs up.
        chmod(fixture.directory, 0o755)
        chmod(fixture.socket, 0o666)
        let stranger = try fixture.run(
            "/usr/sbin/runuser", ["-u", user, "--", "/usr/bin/python3", Self.raw, fixture.socket, "hangup"])
        #expect(stranger.status != 0, "another user got an answer: \(stranger.output)")
        #expect(fixture.errors.contains("refused uid"), "\(fixture.errors) / \(stranger.output)")
    }
}

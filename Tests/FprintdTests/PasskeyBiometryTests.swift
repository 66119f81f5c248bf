import Foundation
import SystemCalls
import TPMKeychainTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The passkey authenticator with fprintd (the mock on a private bus) as built-in user
/// verification, driven by python-fido2's CTAP2 over its socket: a passkey made with a verified
/// finger is bound to the enrolled fingers, signs after a matching finger, and is refused for
/// good (NO_CREDENTIALS) once the enrollment changes, while a passkey made without it goes on.
@Suite("the passkey authenticator with fprintd", .serialized)
struct PasskeyBiometryTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
    static let python = root.appendingPathComponent(".build/passkeys-venv/bin/python").path
    static let client = root.appendingPathComponent("Fixtures/passkeys/fido_client.py").path

    @Test(
        "a passkey made with a verified finger signs after a matching finger, not after another, and never again once the enrolled fingers change; one made without goes on signing"
    )
    func biometryBoundPasskey() async throws {
        let mock = try await FprintdMock.start()
        defer { mock.stop() }
        let device = try await mock.addDevice()
        try await mock.setEnrolledFingers(device, ["right-index-finger"])
        try await mock.setVerifyScript(device, [(result: "verify-match", done: true, milliseconds: 10)])
        let fixture = try BiometryAgent(fprintd: mock.address)
        let socket = fixture.directory + "/passkeys.socket"
        let server = Process()
        server.executableURL = URL(fileURLWithPath: fixture.tool("tpm-keychain-passkeys"))
        server.arguments = [
            "--keychain", fixture.store, "--socket", socket, "--presence-command", "true", "--fprintd-address",
            mock.address,
        ]
        server.environment = fixture.environment
        let output = fixture.directory + "/passkeys.out"
        let errors = fixture.directory + "/passkeys.err"
        _ = FileManager.default.createFile(atPath: output, contents: nil)
        _ = FileManager.default.createFile(atPath: errors, contents: nil)
        server.standardOutput = FileHandle(forWritingAtPath: output)
        server.standardError = FileHandle(forWritingAtPath: errors)
        try server.run()
        defer {
            kill(server.processIdentifier, SIGTERM)
            server.waitUntilExit()
        }
        let deadline = ContinuousClock.now + .seconds(120)
        while !((try? String(contentsOfFile: output, encoding: .utf8)) ?? "").contains("SOCKET=") {
            guard server.isRunning, ContinuousClock.now < deadline else {
                throw FprintdMockError(description: "the authenticator did not start")
            }
            usleep(20_000)
        }
        func client(_ arguments: [String]) throws -> String {
            let run = try fixture.run(Self.python, [Self.client, socket] + arguments)
            return run.output.split(separator: "\n").last.map(String.init) ?? run.output
        }

        let bound = fixture.directory + "/bound.json"
        let plain = fixture.directory + "/plain.json"
        #expect(try client(["uv-register", "uv", "finger@example.com", bound]) == #"{"uv": true}"#)
        #expect(try client(["uv-register", "none", "plain@example.com", plain]) == #"{"uv": false}"#)
        let signed = try client(["uv-assert", bound])
        #expect(
            signed == #"{"signed": true, "uv": true}"#,
            "\(signed)\n\((try? String(contentsOfFile: errors, encoding: .utf8)) ?? "")")
        try await mock.waitForCall("VerifyStart", on: device)
        // Found without an allow list too: the bound one among them (its key is not read to list it).
        #expect(try client(["discover"]) == #"{"credentials": 2}"#)

        try await mock.setVerifyScript(device, [(result: "verify-no-match", done: true, milliseconds: 10)])
        let otherFinger = try client(["uv-assert", bound])
        #expect(otherFinger.contains("error"), "\(otherFinger)")

        // Another finger enrolled: the key's policy names the old set, and the TPM refuses it.
        try await mock.setEnrolledFingers(device, ["right-index-finger", "left-thumb"])
        try await mock.setVerifyScript(device, [(result: "verify-match", done: true, milliseconds: 10)])
        #expect(try client(["uv-assert", bound]) == #"{"error": "NO_CREDENTIALS"}"#)
        #expect(try client(["uv-assert", plain]) == #"{"signed": true, "uv": false}"#)
        // Refused, not lost: the item is still in the keychain.
        let keys = try fixture.run(fixture.tool("tpm-keychain-keys"), ["list", "--keychain", fixture.store])
        #expect(keys.output.contains("finger@example.com"), "\(keys.output)")
    }
}

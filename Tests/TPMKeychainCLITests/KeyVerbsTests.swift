import Crypto
import Foundation
import TPMKeychainTesting
import Testing

/// `tpm-keychain key …`: TPM keys made, listed, printed, used and deleted through the tool, and
/// their key files used by the tpm2 OpenSSL provider on the same TPM; checked with openssl,
/// ssh-keygen and swift-crypto.
@Suite("key verbs")
struct KeyVerbsTests {
    static let message = Data("a release to sign".utf8)

    @Test(
        "key create --key-file writes a 0600 TSS2 key file that openssl's tpm2 provider signs with; key public prints the same key as PEM and as an OpenSSH line ssh-keygen reads; key sign's signature verifies in openssl; key delete ends the key"
    )
    func keyFileKeyRoundTrip() throws {
        let fixture = try CLIFixture()
        let keyFile = fixture.directory + "/deploy.pem"
        let created = try fixture.succeedKey("create", "-l", "deploy", "--key-file", keyFile)
        #expect(created.stdout.contains("created in the TPM"), "\(created)")
        #expect(permissions(keyFile) == 0o600)
        let pem = try String(contentsOfFile: keyFile, encoding: .utf8)
        #expect(pem.hasPrefix("-----BEGIN TSS2 PRIVATE KEY-----"))

        let publicPEM = try fixture.succeedKey("public", "-l", "deploy").stdout
        let publicKey = try P256.Signing.PublicKey(pemRepresentation: publicPEM)
        let openssl = ["TPM2OPENSSL_TCTI": fixture.simulator.tcti]
        let providerPEM = try SystemTool.output(
            "/usr/bin/openssl", ["pkey", "-provider", "tpm2", "-provider", "default", "-in", keyFile, "-pubout"],
            environment: openssl)
        #expect(String(decoding: providerPEM, as: UTF8.self) == publicPEM)

        // OpenSSH: ssh-keygen converts the line back to the same SubjectPublicKeyInfo.
        let line = try fixture.succeedKey("public", "-l", "deploy", "--format", "openssh").stdout
        #expect(line.hasPrefix("ecdsa-sha2-nistp256 ") && line.hasSuffix(" deploy\n"), "\(line)")
        try Data(line.utf8).write(to: URL(fileURLWithPath: fixture.directory + "/deploy.pub"))
        let converted = try SystemTool.output(
            "/usr/bin/ssh-keygen", ["-e", "-m", "PKCS8", "-f", fixture.directory + "/deploy.pub"])
        let sshKey = try P256.Signing.PublicKey(pemRepresentation: String(decoding: converted, as: UTF8.self))
        #expect(sshKey.x963Representation == publicKey.x963Representation)

        // Our signature verifies in openssl; openssl's, made in the TPM from the file, in swift-crypto.
        try Self.message.write(to: URL(fileURLWithPath: fixture.directory + "/message"))
        try Data(publicPEM.utf8).write(to: URL(fileURLWithPath: fixture.directory + "/public.pem"))
        try fixture.succeedKey(
            "sign", "-l", "deploy", "--input", fixture.directory + "/message", "--output",
            fixture.directory + "/signature")
        let verified = try SystemTool.output(
            "/usr/bin/openssl",
            [
                "dgst", "-sha256", "-verify", fixture.directory + "/public.pem", "-signature",
                fixture.directory + "/signature", fixture.directory + "/message",
            ])
        #expect(String(decoding: verified, as: UTF8.self).contains("Verified OK"))
        let providerSignature = try SystemTool.output(
            "/usr/bin/openssl",
            [
                "dgst", "-sha256", "-provider", "tpm2", "-provider", "default", "-propquery", "?provider=tpm2",
                "-sign", keyFile, fixture.directory + "/message",
            ], environment: openssl)
        let signature = try P256.Signing.ECDSASignature(derRepresentation: providerSignature)
        #expect(publicKey.isValidSignature(signature, for: Self.message))

        // export writes the same file again, elsewhere.
        try fixture.succeedKey("export", "-l", "deploy", "--output", fixture.directory + "/again.pem")
        #expect(try String(contentsOfFile: fixture.directory + "/again.pem", encoding: .utf8) == pem)

        try fixture.succeedKey("delete", "-l", "deploy")
        let gone = try fixture.runKey("sign", "-l", "deploy", "--input", fixture.directory + "/message")
        #expect(gone.status == 44, "\(gone)")
        #expect(try fixture.succeedKey("list").stdout.isEmpty)
    }

    @Test(
        "A keychain-only key signs through the tool but is never written as a key file (64); labels are unique (45), several keys of a label need --tag (64), a missing key is 44, a key file is never written over"
    )
    func refusals() throws {
        let fixture = try CLIFixture()
        try fixture.succeedKey("create", "-l", "device", "-t", "one")
        let listed = try fixture.succeedKey("list").stdout
        #expect(listed == "\"device\" tag \"one\": TPM P-256 private key\n", "\(listed)")
        let signed = try fixture.runKey("sign", "-l", "device", "--base64", stdin: Self.message)
        #expect(signed.status == 0, "\(signed)")
        let publicKey = try P256.Signing.PublicKey(
            pemRepresentation: try fixture.succeedKey("public", "-l", "device").stdout)
        let der = try #require(Data(base64Encoded: signed.stdout.trimmingCharacters(in: .newlines)))
        #expect(publicKey.isValidSignature(try P256.Signing.ECDSASignature(derRepresentation: der), for: Self.message))

        let export = try fixture.runKey("export", "-l", "device", "--output", fixture.directory + "/device.pem")
        #expect(export.status == 64, "\(export)")
        #expect(export.lastErrorLine.contains("not made for key files"), "\(export)")
        #expect(!FileManager.default.fileExists(atPath: fixture.directory + "/device.pem"))

        let duplicate = try fixture.runKey("create", "-l", "device", "-t", "one")
        #expect(duplicate.status == 45, "\(duplicate)")
        try fixture.succeedKey("create", "-l", "device", "-t", "two")
        let ambiguous = try fixture.runKey("public", "-l", "device")
        #expect(ambiguous.status == 64 && ambiguous.lastErrorLine.contains("--tag"), "\(ambiguous)")
        try fixture.succeedKey("public", "-l", "device", "-t", "two")
        let missing = try fixture.runKey("public", "-l", "nothing")
        #expect(missing.status == 44, "\(missing)")

        let existing = fixture.directory + "/existing.pem"
        try Data("keep me".utf8).write(to: URL(fileURLWithPath: existing))
        let over = try fixture.runKey("create", "-l", "filed", "--key-file", existing)
        #expect(over.status == 64, "\(over)")
        #expect(try String(contentsOfFile: existing, encoding: .utf8) == "keep me")
        // Refused before the key was made: no key is left without its file.
        #expect(try fixture.runKey("public", "-l", "filed").status == 44)
        let empty = try fixture.runKey("create", "-l", "")
        #expect(empty.status == 64, "\(empty)")
    }
}

extension KeyVerbsTests {
    @Test(
        "key sign of a devicePasscode key asks for the passcode (--passcode-fd): the right one signs, a wrong one signs nothing"
    )
    func signingAsksForThePasscode() throws {
        let fixture = try CLIFixture()
        let passcode = "a passcode 2468\n"
        let set = try CLI.run(
            ["set-passcode", "--keychain", fixture.store, "--passcode-fd", "0"], environment: fixture.environment,
            stdin: Data(passcode.utf8))
        #expect(set.status == 0, "\(set)")
        try fixture.succeedKey("create", "-l", "guarded", "--access-control", "devicePasscode")
        try Self.message.write(to: URL(fileURLWithPath: fixture.directory + "/message"))
        let publicPEM = try fixture.succeedKey("public", "-l", "guarded").stdout
        try Data(publicPEM.utf8).write(to: URL(fileURLWithPath: fixture.directory + "/public.pem"))

        let signed = try fixture.runKey(
            "sign", "-l", "guarded", "--input", fixture.directory + "/message", "--output",
            fixture.directory + "/signature", "--passcode-fd", "0", stdin: Data(passcode.utf8))
        #expect(signed.status == 0, "\(signed)")
        let verified = try SystemTool.output(
            "/usr/bin/openssl",
            [
                "dgst", "-sha256", "-verify", fixture.directory + "/public.pem", "-signature",
                fixture.directory + "/signature", fixture.directory + "/message",
            ])
        #expect(String(decoding: verified, as: UTF8.self).contains("Verified OK"))

        let refused = try fixture.runKey(
            "sign", "-l", "guarded", "--input", fixture.directory + "/message", "--output",
            fixture.directory + "/refused", "--passcode-fd", "0", stdin: Data("not it\n".utf8))
        #expect(refused.status != 0, "\(refused)")
        #expect(!FileManager.default.fileExists(atPath: fixture.directory + "/refused"), "nothing is written")
    }
}

extension CLIFixture {
    /// Runs `key <verb> --keychain <store> arguments...` against this fixture's TPM.
    func runKey(_ verb: String, _ arguments: String..., stdin: Data? = nil) throws -> CLIResult {
        try CLI.run(["key", verb, "--keychain", store] + arguments, environment: environment, stdin: stdin)
    }

    /// As ``runKey(_:_:stdin:)``, recording an issue unless the command exits 0.
    @discardableResult
    func succeedKey(
        _ verb: String, _ arguments: String..., sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> CLIResult {
        let result = try CLI.run(["key", verb, "--keychain", store] + arguments, environment: environment)
        #expect(result.status == 0, "\(result)", sourceLocation: sourceLocation)
        return result
    }
}

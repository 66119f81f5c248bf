import Crypto
import Foundation
import SSHAgent
import Testing

/// `session-bind@openssh.com` on its own: a host's signature over the session identifier is
/// checked before the agent names the host, and the fingerprint is the one ssh-keygen prints.
@Suite struct SessionBindingTests {
    static func ed25519Blob(_ key: Curve25519.Signing.PublicKey) -> [UInt8] {
        var writer = SSHWireWriter()
        writer.string("ssh-ed25519")
        writer.string(Array(key.rawRepresentation))
        return writer.bytes
    }

    /// The extension's fields: host key, session identifier, signature, forwarding flag.
    static func fields(
        hostKey: [UInt8], session: [UInt8], signatureType: String, signature: [UInt8], forwarding: Bool = false
    ) -> [UInt8] {
        var signatureBlob = SSHWireWriter()
        signatureBlob.string(signatureType)
        signatureBlob.string(signature)
        var writer = SSHWireWriter()
        writer.string(hostKey)
        writer.string(session)
        writer.string(signatureBlob.bytes)
        writer.byte(forwarding ? 1 : 0)
        return writer.bytes
    }

    static func ed25519Binding(
        session: [UInt8] = Array(repeating: 7, count: 32), forwarding: Bool = false
    ) throws -> (fields: [UInt8], hostKey: [UInt8]) {
        let host = Curve25519.Signing.PrivateKey()
        let blob = Self.ed25519Blob(host.publicKey)
        let signature = Array(try host.signature(for: session))
        return (
            Self.fields(
                hostKey: blob, session: session, signatureType: "ssh-ed25519", signature: signature,
                forwarding: forwarding), blob
        )
    }

    @Test("an ed25519 host's binding is accepted, with the fingerprint ssh-keygen -l prints for that key")
    func ed25519FingerprintMatchesSSHKeygen() throws {
        let (fields, hostKey) = try Self.ed25519Binding()
        let binding = try #require(SessionBinding(fields: fields))
        #expect(!binding.isForwarding)
        let file = NSTemporaryDirectory() + "host-key-\(UUID().uuidString).pub"
        defer { try? FileManager.default.removeItem(atPath: file) }
        try ("ssh-ed25519 " + Data(hostKey).base64EncodedString() + " host\n").write(
            toFile: file, atomically: true, encoding: .utf8)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/ssh-keygen")
        process.arguments = ["-l", "-E", "sha256", "-f", file]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let printed = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(
            printed.split(separator: " ").dropFirst().first.map(String.init) == binding.hostKeyFingerprint, "\(printed)"
        )
        #expect(binding.description == "host key \(binding.hostKeyFingerprint)")
    }

    @Test("a P-256 host's binding is accepted; a forwarded one says so")
    func ecdsaBinding() throws {
        let host = P256.Signing.PrivateKey()
        let session = Array(repeating: UInt8(9), count: 32)
        let rs = Array(try host.signature(for: session).rawRepresentation)
        var integers = SSHWireWriter()
        integers.mpint(unsigned: rs[0..<32])
        integers.mpint(unsigned: rs[32..<64])
        let fields = Self.fields(
            hostKey: SSHECDSAKey.blob(publicKey: Array(host.publicKey.x963Representation)), session: session,
            signatureType: SSHECDSAKey.algorithm, signature: integers.bytes, forwarding: true)
        let binding = try #require(SessionBinding(fields: fields))
        #expect(binding.isForwarding && binding.description.hasSuffix("(forwarded)"))
    }

    @Test("a signature by another key, over another session, of an unknown type, or with extra bytes: no binding")
    func refusedBindings() throws {
        let session = Array(repeating: UInt8(7), count: 32)
        let host = Curve25519.Signing.PrivateKey()
        let other = Curve25519.Signing.PrivateKey()
        let blob = Self.ed25519Blob(host.publicKey)
        let byOther = Array(try other.signature(for: session))
        #expect(
            SessionBinding(
                fields: Self.fields(hostKey: blob, session: session, signatureType: "ssh-ed25519", signature: byOther))
                == nil)
        let overAnother = Array(try host.signature(for: Array(repeating: UInt8(8), count: 32)))
        #expect(
            SessionBinding(
                fields: Self.fields(
                    hostKey: blob, session: session, signatureType: "ssh-ed25519", signature: overAnother)) == nil)
        let good = Array(try host.signature(for: session))
        #expect(
            SessionBinding(
                fields: Self.fields(hostKey: blob, session: session, signatureType: "rsa-sha2-256", signature: good))
                == nil)
        #expect(
            SessionBinding(
                fields: Self.fields(hostKey: blob, session: session, signatureType: "ssh-ed25519", signature: good) + [
                    0
                ]) == nil)
        #expect(
            SessionBinding(
                fields: Self.fields(hostKey: blob, session: session, signatureType: "ssh-ed25519", signature: good))
                != nil)
        #expect(SessionBinding(fields: []) == nil)
    }
}

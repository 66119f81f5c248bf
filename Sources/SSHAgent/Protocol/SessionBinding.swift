import Crypto
import FoundationEssentials

/// What `session-bind@openssh.com` (OpenSSH 8.9 and later, PROTOCOL.agent) tells the agent about a
/// connection: the server's host key, proven by the server's signature over the session
/// identifier, and whether the connection is a forwarded one. The agent names the host (by its
/// key's fingerprint, the only name it can check) to the person and in its log.
package struct SessionBinding: Equatable, Sendable {
    /// The host key's fingerprint as ssh prints it: `SHA256:` and unpadded base64.
    package let hostKeyFingerprint: String
    package let sessionIdentifier: [UInt8]
    package let isForwarding: Bool

    /// How the agent names the destination: `host key SHA256:…`, with "(forwarded)" when the
    /// request came through another host's forwarded agent.
    package var description: String {
        "host key \(hostKeyFingerprint)" + (isForwarding ? " (forwarded)" : "")
    }

    /// Reads the extension's fields and checks the host's signature over the session identifier.
    ///
    /// - Returns: nil for fields that do not parse, a host key of a kind this agent cannot check
    ///   (only ssh-ed25519 and ecdsa-sha2-nistp256: ssh goes on without the binding), or a
    ///   signature that does not verify.
    package init?(fields: [UInt8]) {
        var reader = SSHWireReader(fields)
        guard let hostKey = try? reader.string(), let session = try? reader.string(),
            let signature = try? reader.string(), let forwarding = try? reader.byte(), reader.isAtEnd,
            forwarding <= 1, !session.isEmpty, session.count <= 64,
            Self.verify(signature, by: hostKey, over: session)
        else { return nil }
        hostKeyFingerprint = "SHA256:" + Self.unpaddedBase64(Array(SHA256.hash(data: hostKey)))
        sessionIdentifier = session
        isForwarding = forwarding == 1
    }

    static func verify(_ signature: [UInt8], by hostKey: [UInt8], over data: [UInt8]) -> Bool {
        var key = SSHWireReader(hostKey)
        var sig = SSHWireReader(signature)
        guard let keyType = try? key.string(), let sigType = try? sig.string(), let sigBytes = try? sig.string(),
            sig.isAtEnd
        else { return false }
        switch (String(decoding: keyType, as: UTF8.self), String(decoding: sigType, as: UTF8.self)) {
        case ("ssh-ed25519", "ssh-ed25519"):
            guard let raw = try? key.string(), key.isAtEnd,
                let publicKey = try? Curve25519.Signing.PublicKey(rawRepresentation: raw)
            else { return false }
            return publicKey.isValidSignature(sigBytes, for: data)
        case (SSHECDSAKey.algorithm, SSHECDSAKey.algorithm):
            guard let point = SSHECDSAKey.publicKey(ofBlob: hostKey),
                let publicKey = try? P256.Signing.PublicKey(x963Representation: point)
            else { return false }
            var integers = SSHWireReader(sigBytes)
            guard let r = try? integers.string(), let s = try? integers.string(), integers.isAtEnd,
                let rs = Self.fixed(r).flatMap({ r in Self.fixed(s).map { r + $0 } }),
                let ecdsa = try? P256.Signing.ECDSASignature(rawRepresentation: rs)
            else { return false }
            return publicKey.isValidSignature(ecdsa, for: data)
        default:
            return false
        }
    }

    /// An mpint of at most 32 bytes (a leading zero aside) as 32 bytes.
    private static func fixed(_ mpint: [UInt8]) -> [UInt8]? {
        let magnitude = mpint.drop { $0 == 0 }
        guard magnitude.count <= 32 else { return nil }
        return [UInt8](repeating: 0, count: 32 - magnitude.count) + magnitude
    }

    private static func unpaddedBase64(_ bytes: [UInt8]) -> String {
        var text = Data(bytes).base64EncodedString()
        while text.hasSuffix("=") { text.removeLast() }
        return text
    }
}

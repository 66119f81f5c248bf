/// How SSH writes a P-256 ECDSA key and its signatures (RFC 5656, sections 3.1 and 3.1.2): the
/// only kind of key the keychain makes in the TPM.
package enum SSHECDSAKey {
    package static let algorithm = "ecdsa-sha2-nistp256"
    static let curve = "nistp256"

    /// The public key blob of `publicKey` (X9.63: 0x04, x, y; 65 bytes), as `ssh-add -L` prints
    /// it base64-encoded after the algorithm name.
    package static func blob(publicKey: [UInt8]) -> [UInt8] {
        var writer = SSHWireWriter()
        writer.string(algorithm)
        writer.string(curve)
        writer.string(publicKey)
        return writer.bytes
    }

    /// The public key `blob` holds, or nil when it is not a P-256 key's blob.
    package static func publicKey(ofBlob blob: [UInt8]) -> [UInt8]? {
        var reader = SSHWireReader(blob)
        guard let name = try? reader.string(), name == Array(algorithm.utf8),
            let curve = try? reader.string(), curve == Array(Self.curve.utf8),
            let point = try? reader.string(), point.count == 65, point.first == 4, reader.isAtEnd
        else { return nil }
        return point
    }

    /// The signature blob of a raw ECDSA signature `rs` (r ‖ s, 32 bytes each, as the TPM returns it).
    package static func signatureBlob(rs: [UInt8]) -> [UInt8]? {
        guard rs.count == 64 else { return nil }
        var integers = SSHWireWriter()
        integers.mpint(unsigned: rs[0..<32])
        integers.mpint(unsigned: rs[32..<64])
        var writer = SSHWireWriter()
        writer.string(algorithm)
        writer.string(integers.bytes)
        return writer.bytes
    }

    /// The OpenSSH public key line (`ecdsa-sha2-nistp256 AAAA... comment`), as authorized_keys holds it.
    package static func authorizedKeyLine(publicKey: [UInt8], comment: String) -> String {
        algorithm + " " + base64(blob(publicKey: publicKey)) + (comment.isEmpty ? "" : " " + comment)
    }

    private static func base64(_ bytes: [UInt8]) -> String {
        let table = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
        var output: [UInt8] = []
        var index = 0
        while index < bytes.count {
            let chunk = bytes[index..<min(index + 3, bytes.count)]
            let value = chunk.enumerated().reduce(UInt32(0)) { $0 | UInt32($1.element) << (16 - 8 * $1.offset) }
            for position in 0..<4 {
                output.append(
                    position <= chunk.count ? table[Int((value >> (18 - 6 * position)) & 0x3F)] : UInt8(ascii: "="))
            }
            index += 3
        }
        return String(decoding: output, as: UTF8.self)
    }
}

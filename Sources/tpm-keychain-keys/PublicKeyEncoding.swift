import CommandLineSupport
import Crypto
import CryptoExtras
import Foundation
import ToolSupport

/// A public key as SecKeyCopyExternalRepresentation gives it (X9.63 for EC, PKCS#1 for RSA),
/// written as the PEM that openssl reads or as an OpenSSH public key line (RFC 5656 §3.1).
struct PublicKeyEncoding {
    private let bytes: [UInt8]
    private let isRSA: Bool

    init(_ bytes: [UInt8], isRSA: Bool) throws {
        self.bytes = bytes
        self.isRSA = isRSA
    }

    /// The SubjectPublicKeyInfo PEM ("-----BEGIN PUBLIC KEY-----"), with a final newline.
    func pem() throws -> String {
        do {
            if isRSA { return try _RSA.Signing.PublicKey(derRepresentation: bytes).pemRepresentation + "\n" }
            switch bytes.count {
            case 65: return try P256.Signing.PublicKey(x963Representation: bytes).pemRepresentation + "\n"
            case 97: return try P384.Signing.PublicKey(x963Representation: bytes).pemRepresentation + "\n"
            case 133: return try P521.Signing.PublicKey(x963Representation: bytes).pemRepresentation + "\n"
            default: break
            }
        } catch {
            throw CommandFailure(ExitStatus.dataError, "The public key is malformed: \(error)")
        }
        throw CommandFailure(ExitStatus.dataError, "The public key has \(bytes.count) bytes, not an EC point's")
    }

    /// `ecdsa-sha2-nistp256 AAAA… comment`, for authorized_keys.
    func openSSH(comment: String) throws -> String {
        let curves = [65: "nistp256", 97: "nistp384", 133: "nistp521"]
        guard !isRSA, let curve = curves[bytes.count], bytes.first == 0x04 else {
            throw CommandFailure(ExitStatus.usage, "OpenSSH public keys are written for EC keys only")
        }
        let type = "ecdsa-sha2-" + curve
        var blob: [UInt8] = []
        for field in [Array(type.utf8), Array(curve.utf8), bytes] {
            let count = UInt32(field.count)
            blob += [UInt8(count >> 24), UInt8(count >> 16 & 0xFF), UInt8(count >> 8 & 0xFF), UInt8(count & 0xFF)]
            blob += field
        }
        // A comment is one field of the line: no line breaks.
        let cleanComment = comment.filter { !$0.isNewline }
        return type + " " + Data(blob).base64EncodedString() + (cleanComment.isEmpty ? "" : " " + cleanComment)
    }
}

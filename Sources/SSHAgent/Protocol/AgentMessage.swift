import SystemCalls
import WireFormat

/// The messages of OpenSSH's agent protocol (draft-miller-ssh-agent, PROTOCOL.agent) this agent
/// reads and writes. A message on the wire is a uint32 length, then that many bytes: a type byte
/// and its fields (uint32, and strings as a uint32 length and the bytes).
package enum AgentRequest: Equatable, Sendable {
    case requestIdentities
    /// The key's public blob, the data to sign, and the flags (SSH_AGENT_RSA_SHA2_256 = 2, _512 = 4).
    case sign(keyBlob: [UInt8], data: [UInt8], flags: UInt32)
    /// An identity to add (ADD_IDENTITY 17, ADD_ID_CONSTRAINED 25): refused, the keychain's keys
    /// are made in the TPM (`key create --tag ssh`), never handed in.
    case addIdentity
    case removeIdentity(keyBlob: [UInt8])
    case removeAllIdentities
    case lock(passphrase: [UInt8])
    case unlock(passphrase: [UInt8])
    /// An extension request by name (`session-bind@openssh.com`, `query`, ...).
    case `extension`(name: String, contents: [UInt8])
    /// A type this agent does not know (smartcard keys, the SSH1 messages): answered with failure.
    case other(type: UInt8)

    /// Drops a lock or unlock passphrase from the request and zeroes its bytes: the request's
    /// copy is then the only one (the answer is made), so the zeroing reaches the bytes read.
    package mutating func erasePassphrase() {
        switch self {
        case .lock(var passphrase), .unlock(var passphrase):
            self = .other(type: 0)
            erase(&passphrase)
        default:
            break
        }
    }

    /// The largest message this agent reads: OpenSSH's own agent refuses more than 256 KiB.
    package static let maximumLength = 256 * 1024

    /// Parses one message body (the type byte and its fields, without the length).
    ///
    /// - Throws: ``AgentProtocolError`` for an empty or truncated message, or a field longer than
    ///   the message.
    package init(parsing body: [UInt8]) throws(AgentProtocolError) {
        var reader = SSHWireReader(body)
        let type = try reader.byte()
        switch type {
        case 11:
            self = .requestIdentities
        case 13:
            self = .sign(keyBlob: try reader.string(), data: try reader.string(), flags: try reader.uint32())
        case 17, 25:
            self = .addIdentity
            return // Its fields (a private key) are not parsed: they are refused unread.
        case 18:
            self = .removeIdentity(keyBlob: try reader.string())
        case 19:
            self = .removeAllIdentities
        case 22:
            self = .lock(passphrase: try reader.string())
        case 23:
            self = .unlock(passphrase: try reader.string())
        case 27:
            let name = try reader.string()
            guard let text = String(validating: name, as: UTF8.self) else {
                throw AgentProtocolError("An extension name is not UTF-8")
            }
            self = .extension(name: text, contents: reader.rest())
            return
        default:
            self = .other(type: type)
            return
        }
        guard reader.isAtEnd else {
            throw AgentProtocolError("Message type \(type) has \(reader.remaining) bytes too many")
        }
    }
}

/// What the agent answers.
package enum AgentResponse: Equatable, Sendable {
    case failure
    case success
    /// Each identity's public key blob and comment.
    case identities([(blob: [UInt8], comment: String)])
    case signature([UInt8])
    /// An extension this agent does not support (SSH_AGENT_EXTENSION_FAILURE).
    case extensionFailure
    /// An extension's answer: SSH_AGENT_SUCCESS, then the extension's own fields.
    case extensionAnswer([UInt8])

    /// The message with its length prefix, ready to write.
    package var framed: [UInt8] {
        var writer = SSHWireWriter()
        switch self {
        case .failure: writer.byte(5)
        case .success: writer.byte(6)
        case .identities(let identities):
            writer.byte(12)
            writer.uint32(UInt32(identities.count))
            for identity in identities {
                writer.string(identity.blob)
                writer.string(Array(identity.comment.utf8))
            }
        case .signature(let blob):
            writer.byte(14)
            writer.string(blob)
        case .extensionFailure: writer.byte(28)
        case .extensionAnswer(let fields):
            writer.byte(6)
            writer.raw(fields)
        }
        var framed = SSHWireWriter()
        framed.string(writer.bytes)
        return framed.bytes
    }

    package static func == (lhs: AgentResponse, rhs: AgentResponse) -> Bool { lhs.framed == rhs.framed }
}

/// A message that does not follow the protocol: the connection is closed, as OpenSSH's agent does.
package struct AgentProtocolError: Error, Equatable, CustomStringConvertible {
    package let description: String
    package init(_ description: String) { self.description = description }
}

/// SSH's wire encoding (RFC 4251, section 5): big-endian uint32, strings with a uint32 length.
package struct SSHWireWriter {
    package private(set) var bytes: [UInt8] = []
    package init() {}
    package mutating func raw(_ fields: [UInt8]) { bytes += fields }
    package mutating func byte(_ value: UInt8) { bytes.append(value) }
    package mutating func uint32(_ value: UInt32) { BigEndian.append(value, to: &bytes) }
    package mutating func string(_ value: [UInt8]) {
        uint32(UInt32(value.count))
        bytes.append(contentsOf: value)
    }
    package mutating func string(_ text: String) { string(Array(text.utf8)) }
    /// An mpint (RFC 4251): a non-negative integer given big-endian, without leading zeros, with
    /// a zero byte before a first byte whose top bit is set.
    package mutating func mpint(unsigned magnitude: ArraySlice<UInt8>) {
        var value = Array(magnitude.drop { $0 == 0 })
        if let first = value.first, first & 0x80 != 0 { value.insert(0, at: 0) }
        string(value)
    }
}

package struct SSHWireReader {
    private let bytes: [UInt8]
    private var offset = 0
    package init(_ bytes: [UInt8]) { self.bytes = bytes }
    package var remaining: Int { bytes.count - offset }
    package var isAtEnd: Bool { offset == bytes.count }

    package mutating func byte() throws(AgentProtocolError) -> UInt8 {
        guard remaining >= 1 else { throw AgentProtocolError("The message ends early") }
        defer { offset += 1 }
        return bytes[offset]
    }

    package mutating func uint32() throws(AgentProtocolError) -> UInt32 {
        guard remaining >= 4 else { throw AgentProtocolError("The message ends early") }
        defer { offset += 4 }
        return BigEndian.integer(bytes[offset..<offset + 4])
    }

    package mutating func string() throws(AgentProtocolError) -> [UInt8] {
        let count = Int(try uint32())
        guard count <= remaining else {
            throw AgentProtocolError("A string of \(count) bytes is longer than what is left (\(remaining))")
        }
        defer { offset += count }
        return Array(bytes[offset..<offset + count])
    }

    package mutating func rest() -> [UInt8] {
        defer { offset = bytes.count }
        return Array(bytes[offset...])
    }
}

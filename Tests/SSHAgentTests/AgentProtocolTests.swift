import Crypto
import Foundation
import SSHAgent
import Testing

/// The agent protocol's messages on their own: what is read, what is refused, what is written.
@Suite struct AgentProtocolTests {
    static func message(_ type: UInt8, _ fields: (inout SSHWireWriter) -> Void = { _ in }) -> [UInt8] {
        var writer = SSHWireWriter()
        writer.byte(type)
        fields(&writer)
        return writer.bytes
    }

    @Test("each request this agent knows is read with its fields")
    func readsRequests() throws {
        #expect(try AgentRequest(parsing: Self.message(11)) == .requestIdentities)
        let sign = Self.message(13) {
            $0.string([1, 2, 3])
            $0.string([4, 5])
            $0.uint32(2)
        }
        #expect(try AgentRequest(parsing: sign) == .sign(keyBlob: [1, 2, 3], data: [4, 5], flags: 2))
        #expect(
            try AgentRequest(parsing: Self.message(22) { $0.string("pass") }) == .lock(passphrase: Array("pass".utf8)))
        #expect(
            try AgentRequest(parsing: Self.message(23) { $0.string("pass") }) == .unlock(passphrase: Array("pass".utf8))
        )
        #expect(try AgentRequest(parsing: Self.message(19)) == .removeAllIdentities)
        #expect(try AgentRequest(parsing: Self.message(17) { $0.string("ecdsa-sha2-nistp256") }) == .addIdentity)
        let bind = Self.message(27) {
            $0.string("session-bind@openssh.com")
            $0.string([9])
        }
        #expect(
            try AgentRequest(parsing: bind) == .extension(name: "session-bind@openssh.com", contents: [0, 0, 0, 1, 9]))
        #expect(try AgentRequest(parsing: Self.message(1)) == .other(type: 1))
    }

    @Test("a lock or unlock request lets go of its passphrase once answered; other requests stay as they are")
    func passphraseIsDropped() throws {
        for type: UInt8 in [22, 23] {
            var request = try AgentRequest(parsing: Self.message(type) { $0.string("correct horse") })
            request.erasePassphrase()
            #expect(request == .other(type: 0), "\(type)")
        }
        var listing = AgentRequest.requestIdentities
        listing.erasePassphrase()
        #expect(listing == .requestIdentities)
    }

    @Test("an empty, truncated or overlong message is a protocol error, never a crash")
    func refusesMalformedMessages() {
        #expect(throws: AgentProtocolError.self) { try AgentRequest(parsing: []) }
        // A string whose length runs past the message.
        #expect(throws: AgentProtocolError.self) {
            try AgentRequest(parsing: [13, 0xFF, 0xFF, 0xFF, 0xFF, 1, 2])
        }
        #expect(throws: AgentProtocolError.self) { try AgentRequest(parsing: [13, 0, 0, 0, 1, 7]) }
        // Fields beyond the message's own.
        #expect(throws: AgentProtocolError.self) { try AgentRequest(parsing: Self.message(11) { $0.byte(0) }) }
        #expect(throws: AgentProtocolError.self) { try AgentRequest(parsing: [27, 0, 0, 0, 2, 0xC3, 0x28]) }
        for length in 0..<40 {
            let random = [13] + (0..<length).map { _ in UInt8.random(in: 0...255) }
            _ = try? AgentRequest(parsing: random)
        }
    }

    @Test("responses are framed as OpenSSH reads them")
    func writesResponses() {
        #expect(AgentResponse.failure.framed == [0, 0, 0, 1, 5])
        #expect(AgentResponse.success.framed == [0, 0, 0, 1, 6])
        #expect(AgentResponse.extensionFailure.framed == [0, 0, 0, 1, 28])
        #expect(
            AgentResponse.identities([(blob: [7, 8], comment: "k")]).framed
                == [0, 0, 0, 16, 12, 0, 0, 0, 1, 0, 0, 0, 2, 7, 8, 0, 0, 0, 1, UInt8(ascii: "k")])
        #expect(AgentResponse.signature([1]).framed == [0, 0, 0, 6, 14, 0, 0, 0, 1, 1])
        #expect(AgentResponse.extensionAnswer([0, 0, 0, 1, 9]).framed == [0, 0, 0, 6, 6, 0, 0, 0, 1, 9])
    }

    @Test("a P-256 key's blob, signature and authorized_keys line follow RFC 5656 and RFC 4251")
    func ecdsaEncoding() throws {
        let key = P256.Signing.PrivateKey()
        let publicKey = Array(key.publicKey.x963Representation)
        let blob = SSHECDSAKey.blob(publicKey: publicKey)
        #expect(SSHECDSAKey.publicKey(ofBlob: blob) == publicKey)
        #expect(SSHECDSAKey.publicKey(ofBlob: blob + [0]) == nil)
        #expect(SSHECDSAKey.publicKey(ofBlob: Array(blob.dropLast())) == nil)
        let line = SSHECDSAKey.authorizedKeyLine(publicKey: publicKey, comment: "test")
        #expect(line.hasPrefix("ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABB"))
        #expect(line.split(separator: " ")[1] == Substring(Data(blob).base64EncodedString()))

        // r and s with their top bits set and with leading zeros: each mpint as RFC 4251 wants.
        let rs = [0x80] + [UInt8](repeating: 1, count: 31) + [0, 0] + [UInt8](repeating: 2, count: 30)
        let signature = try #require(SSHECDSAKey.signatureBlob(rs: rs))
        var reader = SSHWireReader(signature)
        #expect(try reader.string() == Array("ecdsa-sha2-nistp256".utf8))
        var integers = SSHWireReader(try reader.string())
        #expect(try integers.string() == [0, 0x80] + [UInt8](repeating: 1, count: 31))
        #expect(try integers.string() == [UInt8](repeating: 2, count: 30))
        #expect(integers.isAtEnd && reader.isAtEnd)
        #expect(SSHECDSAKey.signatureBlob(rs: [1, 2]) == nil)
    }
}

import DBus
import Testing

@testable import SecretService

/// Sessions without a bus: OpenSession's agreement, and a session answering only the connection
/// that opened it.
@Suite("session objects")
struct SessionObjectTests {
    static let path = ObjectPaths.sessionPrefix + "1"

    @Test("plain answers an empty string; DH answers our public value, and both sides agree on the key")
    func negotiation() throws {
        let (plainOutput, plain) = try SessionObject.negotiate(
            algorithm: "plain", input: .string(""), path: Self.path, owner: ":1.5")
        #expect(plainOutput == .string(""))
        #expect(plain.path == Self.path && plain.owner == ":1.5")
        #expect(try plain.encrypt([1, 2, 3]).value == [1, 2, 3])

        var client = try DiffieHellmanGroup2.KeyPair()
        defer { client.erase() }
        let (output, session) = try SessionObject.negotiate(
            algorithm: TransferSession.diffieHellmanName, input: .bytes(client.publicValue), path: Self.path,
            owner: ":1.5")
        let ourPublic = try #require(output.byteArray)
        #expect(ourPublic.count == DiffieHellmanGroup2.size)
        let clientSide = TransferSession(
            path: Self.path, owner: ":1.5", algorithm: .diffieHellman(try client.sessionKey(peerPublic: ourPublic)))
        let (parameters, value) = try session.encrypt(Array("hunter2".utf8))
        #expect(try clientSide.decrypt(parameters: parameters, value: value) == Array("hunter2".utf8))
    }

    @Test("an unknown algorithm is NotSupported; DH without a byte array, or with 1, is InvalidArgs")
    func negotiationRefused() {
        let unknown = #expect(throws: SecretServiceError.self) {
            _ = try SessionObject.negotiate(algorithm: "rot13", input: .string(""), path: Self.path, owner: ":1.5")
        }
        #expect(unknown?.name == .notSupported)
        #expect(
            unknown?.message
                == "The algorithm \"rot13\" is not supported; use plain or dh-ietf1024-sha256-aes128-cbc-pkcs7")
        for input in [BusValue.string("AAEC"), .bytes([1])] {
            let error = #expect(throws: SecretServiceError.self) {
                _ = try SessionObject.negotiate(
                    algorithm: TransferSession.diffieHellmanName, input: input, path: Self.path, owner: ":1.5")
            }
            #expect(error?.name == .invalidArgs, "\(input)")
        }
    }

    @Test("a session is its opener's: another connection gets NoSession, and cannot close it")
    func ownership() throws {
        var table = SessionTable()
        table.add(TransferSession(path: Self.path, owner: ":1.5", algorithm: .plain))
        #expect(try table.session(Self.path, of: ":1.5").owner == ":1.5")

        let stranger = #expect(throws: SecretServiceError.self) { try table.session(Self.path, of: ":1.6") }
        #expect(stranger?.name == .noSession)
        #expect(stranger?.message == "No session \(Self.path) opened by this connection; call OpenSession")
        let missing = #expect(throws: SecretServiceError.self) { try table.session(Self.path + "0", of: ":1.5") }
        #expect(missing?.name == .noSession)

        let closing = #expect(throws: SecretServiceError.self) { try table.close(Self.path, by: ":1.6") }
        #expect(closing?.name == .noSuchObject)
        #expect(closing?.message == "No session \(Self.path) of this connection")
        #expect(table.count(of: ":1.5") == 1)

        try table.close(Self.path, by: ":1.5")
        #expect(table.count(of: ":1.5") == 0 && table.paths.isEmpty)
        #expect(throws: SecretServiceError.self) { try table.session(Self.path, of: ":1.5") }
    }

    @Test("a connection that leaves takes its sessions, and only its own")
    func forgettingAnOwner() {
        var table = SessionTable()
        for (number, owner) in [(1, ":1.5"), (2, ":1.5"), (3, ":1.6")] {
            table.add(TransferSession(path: ObjectPaths.sessionPrefix + "\(number)", owner: owner, algorithm: .plain))
        }
        #expect(table.count(of: ":1.5") == 2 && table.count(of: ":1.6") == 1)
        table.forget(owner: ":1.5")
        #expect(table.count(of: ":1.5") == 0)
        #expect(table.paths == [ObjectPaths.sessionPrefix + "3"])
    }

    @Test("a secret struct decrypts only through its sender's session, and goes back out as (oayays)")
    func secretStructs() throws {
        var table = SessionTable()
        let session = TransferSession(path: Self.path, owner: ":1.5", algorithm: .plain)
        table.add(session)
        let sent = try session.secretStruct([7, 8], contentType: "text/plain")
        #expect(
            sent == .structure([.objectPath(Self.path), .bytes([]), .bytes([7, 8]), .string("text/plain")]))
        let received = try table.secret(from: sent, sender: ":1.5")
        #expect(received.value == [7, 8] && received.contentType == "text/plain")

        let stranger = #expect(throws: SecretServiceError.self) { _ = try table.secret(from: sent, sender: ":1.6") }
        #expect(stranger?.name == .noSession)
        let malformed = #expect(throws: SecretServiceError.self) {
            _ = try table.secret(from: .structure([.objectPath(Self.path), .bytes([])]), sender: ":1.5")
        }
        #expect(malformed?.name == .invalidArgs)
        #expect(malformed?.message == "A secret is (oayays): session, parameters, value, content type")
    }

    @Test("a connection holding the most sessions or prompts is refused the next one with LimitsExceeded")
    func connectionLimits() throws {
        try ConnectionLimits.check(ConnectionLimits.sessions - 1, ConnectionLimits.sessions, of: "sessions")
        let error = #expect(throws: SecretServiceError.self) {
            try ConnectionLimits.check(ConnectionLimits.prompts, ConnectionLimits.prompts, of: "prompts")
        }
        #expect(error?.name == .limitsExceeded)
        #expect(error?.message == "This connection holds 16 prompts, the most one may: close some first")
    }
}

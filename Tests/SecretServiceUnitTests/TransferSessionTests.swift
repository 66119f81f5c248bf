import Crypto
import Testing

@testable import SecretService

/// The DH session secrets cross the bus in: the agreement, the range check, AES-CBC.
@Suite("transfer sessions")
struct TransferSessionTests {
    static let prime = DiffieHellmanGroup2.prime

    @Test("two key pairs agree on one key, and a secret encrypted under it decrypts on the other side")
    func agreement() throws {
        var daemon = try DiffieHellmanGroup2.KeyPair()
        var client = try DiffieHellmanGroup2.KeyPair()
        defer {
            daemon.erase()
            client.erase()
        }
        #expect(daemon.publicValue.count == DiffieHellmanGroup2.size)
        let daemonKey = try daemon.sessionKey(peerPublic: client.publicValue)
        let clientKey = try client.sessionKey(peerPublic: daemon.publicValue)
        #expect(daemonKey == clientKey)
        let sending = TransferSession(path: "/s/1", owner: ":1.5", algorithm: .diffieHellman(daemonKey))
        let receiving = TransferSession(path: "/s/1", owner: ":1.5", algorithm: .diffieHellman(clientKey))
        let (parameters, value) = try sending.encrypt(Array("hunter2".utf8))
        #expect(value != Array("hunter2".utf8) && parameters.count == 16)
        #expect(try receiving.decrypt(parameters: parameters, value: value) == Array("hunter2".utf8))
        #expect(throws: SecretServiceError.self) {
            try receiving.decrypt(parameters: Array(parameters.prefix(8)), value: value)
        }
    }

    @Test("public values 0, 1, p-1, p, above p, and longer than the prime are refused as invalid arguments")
    func outOfRangeValuesAreRefused() throws {
        var pair = try DiffieHellmanGroup2.KeyPair()
        defer { pair.erase() }
        var pMinusOne = Self.prime
        pMinusOne[pMinusOne.count - 1] -= 1
        let tooLong = [UInt8](repeating: 0, count: 1) + [UInt8](repeating: 0xFF, count: 128)
        for value in [[], [0], [1], [0, 0, 1], pMinusOne, Self.prime, [UInt8](repeating: 0xFF, count: 128), tooLong] {
            #expect(throws: SecretServiceError.self, "\(value.count) bytes") {
                _ = try pair.sessionKey(peerPublic: value)
            }
        }
        // 2 and p-2 are in range.
        var pMinusTwo = Self.prime
        pMinusTwo[pMinusTwo.count - 1] -= 2
        _ = try pair.sessionKey(peerPublic: [2])
        _ = try pair.sessionKey(peerPublic: pMinusTwo)
    }
}

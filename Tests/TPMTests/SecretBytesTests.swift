import SystemCalls
import Testing

@testable import TPM

@Suite(.serialized) struct SecretBytesTests {
    @Test("Secrets are zeroized before their memory is freed")
    func zeroizedOnRelease() {
        let observed = Locked<[[UInt8]]>([])
        SecretBytes.releaseObserver.withLock { $0 = { buffer in observed.withLock { $0.append(Array(buffer)) } } }
        defer { SecretBytes.releaseObserver.withLock { $0 = nil } }
        do {
            let secret = SecretBytes(copying: distinctSecret(0x77, count: 48))
            #expect(secret.bytes == distinctSecret(0x77, count: 48))
        }
        let released = observed.withLock { $0 }
        #expect(released.contains { $0.count == 48 })
        #expect(released.allSatisfy { $0.allSatisfy { $0 == 0 } })
    }

    @Test func equalityIsByContentAndLength() {
        #expect(SecretBytes(copying: [1, 2, 3]) == SecretBytes(copying: [1, 2, 3]))
        #expect(SecretBytes(copying: [1, 2, 3]) != SecretBytes(copying: [1, 2, 4]))
        #expect(SecretBytes(copying: [1, 2]) != SecretBytes(copying: [1, 2, 0]))
        #expect(SecretBytes(copying: [UInt8]()).count == 0)
    }

    @Test func randomSecretsDiffer() throws {
        #expect(try SecretBytes.random(count: 32) != SecretBytes.random(count: 32))
    }
}

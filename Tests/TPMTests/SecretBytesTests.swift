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

    @Test("A secret's memory starts as zeros, also when it is a page an earlier secret held")
    func reusedPagesStartZeroed() {
        for round in 0..<40 {
            // More than the kept pages at once (fresh pages, and kept ones after the first round),
            // released; then one more, which takes a page one of them held.
            do {
                let many = (0..<20).map { SecretBytes(copying: distinctSecret(UInt8(round), count: 64 + $0)) }
                #expect(many.allSatisfy { $0.bytes.contains { $0 != 0 } })
            }
            let fresh = SecretBytes(count: 256) { buffer in
                #expect(buffer.allSatisfy { $0 == 0 }, "round \(round): a secret began with earlier bytes")
                buffer.storeBytes(of: 0xAB, toByteOffset: 0, as: UInt8.self)
            }
            #expect(fresh.bytes.first == 0xAB)
        }
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

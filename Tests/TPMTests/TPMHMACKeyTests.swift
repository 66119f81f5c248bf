import Foundation
import TPMKeychainTesting
import Testing

@testable import TPM

/// HMAC keys made in the TPM (the Secret portal's per-application secrets): the same input gives
/// the same 32 bytes, another input or key another, the result never crosses the bus in clear, and
/// the blob is worthless on another TPM.
@Suite struct TPMHMACKeyTests {
    @Test(
        "TPM2_HMAC with a key made in the TPM: stable for one input, different for another input or key, never in clear on the bus"
    )
    func hmacIsStableAndEncrypted() throws {
        try withRecordingProxy { proxy, configuration, _ in
            let key = try withConnection(configuration) { try $0.createHMACKey() }
            let other = try withConnection(configuration) { try $0.createHMACKey() }
            proxy.reset()
            let first = try withConnection(configuration) { try $0.hmac(Array("org.example.App".utf8), with: key) }
            #expect(first.count == 32)
            #expect(!proxy.recordedBytes().containsSubsequence(Array(first.bytes.prefix(16))))
            #expect(proxy.commandCodes.contains(0x155)) // TPM2_HMAC
            let again = try withConnection(configuration) { try $0.hmac(Array("org.example.App".utf8), with: key) }
            #expect(again.bytes == first.bytes)
            let otherApp = try withConnection(configuration) { try $0.hmac(Array("org.example.Other".utf8), with: key) }
            #expect(otherApp.bytes != first.bytes)
            let otherKey = try withConnection(configuration) { try $0.hmac(Array("org.example.App".utf8), with: other) }
            #expect(otherKey.bytes != first.bytes)
            // Stored and read back, the key is the same key.
            let restored = try TPMHMACKey(serialized: key.serialized())
            #expect(restored == key)
            let fromBlob = try withConnection(configuration) {
                try $0.hmac(Array("org.example.App".utf8), with: restored)
            }
            #expect(fromBlob.bytes == first.bytes)
            expectTPMError(.invalidArgument) {
                _ = try withConnection(configuration) { try $0.hmac([UInt8](repeating: 1, count: 1025), with: key) }
            }
        }
    }

    @Test("an HMAC key's blob is refused by another TPM, and a damaged or foreign blob is malformed")
    func blobIsBoundToItsTPM() throws {
        let key = try withSimulator { _, configuration in try withConnection(configuration) { try $0.createHMACKey() } }
        try withSimulator { _, second in
            expectTPMError(.wrongStorageKey) {
                _ = try withConnection(second) { try $0.hmac(Array("org.example.App".utf8), with: key) }
            }
        }
        var damaged = key.serialized()
        damaged[0] = UInt8(ascii: "X")
        expectTPMError(.malformedData) { _ = try TPMHMACKey(serialized: damaged) }
        expectTPMError(.malformedData) { _ = try TPMHMACKey(serialized: key.serialized() + [0]) }
        let signing = try withSimulator { _, configuration in
            try withConnection(configuration) { try $0.createKey(.signing) }
        }
        // A signing key's areas are not an HMAC key.
        var foreign = Array("TKHM".utf8) + [0, 1]
        foreign += Array(signing.serialized().dropFirst(7))
        expectTPMError(.malformedData) { _ = try TPMHMACKey(serialized: foreign) }
    }
}

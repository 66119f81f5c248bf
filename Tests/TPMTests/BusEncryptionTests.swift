import TPMKeychainTesting
import Testing

@testable import TPM

/// Records every byte between the TSS and swtpm and looks for secrets in it.
@Suite struct BusEncryptionTests {
    struct Capture {
        let traffic: [UInt8]
        let secrets: [[UInt8]]
        let commandCodes: [UInt32]
    }

    /// Seals and unseals a recognisable secret behind a PIN, writes and reads NV data, and asks for
    /// TPM randomness, all through a recording proxy.
    static func captureSecretOperations(parameterEncryption: Bool) throws -> Capture {
        try withSimulator { simulator, _ in
            let proxy = try RecordingTPMProxy.start(forwardingTo: simulator.port)
            defer { proxy.stop() }
            let configuration = TPMConfiguration(tcti: proxy.tcti)
            let secret = distinctSecret(0xA1)
            let pin = distinctSecret(0xB2, count: 16)
            let nvData = distinctSecret(0xC3)
            let nvAuth = distinctSecret(0xD4, count: 12)
            var generatedKey: [UInt8] = []
            try withConnection(configuration, parameterEncryption: parameterEncryption) { tpm in
                let sealed = try tpm.seal(SecretBytes(copying: secret), authValue: SecretBytes(copying: pin))
                #expect(try tpm.unseal(sealed, authValue: SecretBytes(copying: pin)).bytes == secret)
                let (key, keySealed) = try tpm.generateSealedKey()
                #expect(try tpm.unseal(keySealed) == key)
                generatedKey = key.bytes
                try tpm.defineNVIndex(0x0150_0020, kind: .ordinary(size: 32), authValue: SecretBytes(copying: nvAuth))
                try tpm.writeNV(
                    0x0150_0020, data: SecretBytes(copying: nvData), authValue: SecretBytes(copying: nvAuth))
                #expect(try tpm.readNV(0x0150_0020, count: 32, authValue: SecretBytes(copying: nvAuth)).bytes == nvData)
            }
            return Capture(
                traffic: proxy.recordedBytes(), secrets: [secret, pin, nvData, nvAuth, generatedKey],
                commandCodes: proxy.commandCodes)
        }
    }

    @Test("No secret, PIN, NV value or generated key crosses the bus in clear")
    func secretsAreEncryptedOnTheBus() throws {
        let capture = try Self.captureSecretOperations(parameterEncryption: true)
        #expect(capture.commandCodes.contains(0x153)) // TPM2_Create
        #expect(capture.commandCodes.contains(0x15E)) // TPM2_Unseal
        #expect(capture.traffic.count > 1000)
        for secret in capture.secrets {
            // Any 8-byte window of a secret would already be a leak.
            for start in stride(from: 0, through: secret.count - 8, by: 4) {
                #expect(
                    !capture.traffic.containsSubsequence(Array(secret[start..<start + 8])),
                    "secret bytes \(start)..<\(start + 8) of \(secret.count) appeared on the bus")
            }
        }
    }

    @Test("Control: without parameter encryption the same secrets are visible")
    func controlRunShowsSecrets() throws {
        let capture = try Self.captureSecretOperations(parameterEncryption: false)
        let (secret, pin, nvData, nvAuth, generatedKey) =
            (capture.secrets[0], capture.secrets[1], capture.secrets[2], capture.secrets[3], capture.secrets[4])
        #expect(capture.traffic.containsSubsequence(secret))
        #expect(capture.traffic.containsSubsequence(pin)) // in TPM2_Create's sensitive area
        #expect(capture.traffic.containsSubsequence(nvData))
        #expect(capture.traffic.containsSubsequence(nvAuth)) // in TPM2_NV_DefineSpace
        #expect(capture.traffic.containsSubsequence(generatedKey)) // in TPM2_Unseal's response
    }
}

import TPMKeychainTesting
import Testing

@testable import TPM

/// ESAPI's OpenSSL backend asks for a new library context for every hash and HMAC; libtss2-esys
/// is pointed at one shared private context instead (CESAPICryptoContext).
@Suite(.tags(.concurrency)) struct ESAPICryptoContextTests {
    @Test("ESAPI's hashes and HMACs in sealing, salted sessions and NV access share one OpenSSL context")
    func esapiGetsOneContext() throws {
        #expect(ESAPICryptoContext.install())
        let before = ESAPICryptoContext.counts
        try withSimulator { _, configuration in
            try withConnection(configuration) { tpm in
                let pin = SecretBytes(copying: distinctSecret(0x31, count: 12))
                let sealed = try tpm.seal(SecretBytes(copying: distinctSecret(0x32)), authValue: pin)
                #expect(try tpm.unseal(sealed, authValue: pin).bytes == distinctSecret(0x32))
                try tpm.defineNVIndex(0x0150_0031, kind: .ordinary(size: 16), authValue: pin)
                try tpm.writeNV(
                    0x0150_0031, data: SecretBytes(copying: distinctSecret(0x33, count: 16)), authValue: pin)
                #expect(try tpm.readNV(0x0150_0031, count: 16, authValue: pin).bytes == distinctSecret(0x33, count: 16))
            }
        }
        let after = ESAPICryptoContext.counts
        // Every command above carried an HMAC session: ESAPI asked for contexts dozens of times
        // (through the patched slot, or the count would not move) ...
        #expect(after.requested - before.requested >= 10)
        // ... and all of them were the one context made the first time.
        #expect(after.made == 1)
    }

    @Test("Installing twice changes nothing")
    func installIsIdempotent() {
        #expect(ESAPICryptoContext.install())
        let made = ESAPICryptoContext.counts.made
        #expect(ESAPICryptoContext.install())
        #expect(ESAPICryptoContext.counts.made == made)
    }
}

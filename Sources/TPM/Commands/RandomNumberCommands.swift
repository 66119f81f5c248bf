internal import CTSS2

/// TPM 2.0 Part 3 §16.1 TPM2_GetRandom.
extension Engine {
    /// `count` bytes from the TPM's RNG, returned encrypted under the salted `session` because they
    /// become key material.
    func randomBytes(_ count: Int, session: ESYS_TR) throws -> SecretBytes {
        guard count > 0, count <= 32 else {
            throw TPMError(.invalidArgument, "TPM2_GetRandom is asked for 1 to 32 bytes at a time")
        }
        // GetRandom authorizes nothing: its session is there only to encrypt, and the TPM refuses a
        // session that neither encrypts nor audits.
        let encryptingSession = parameterEncryption ? session : ESYS_TR(ESYS_TR_NONE)
        try setAttributes(encryptingSession, encrypt: true)
        var random: UnsafeMutablePointer<TPM2B_DIGEST>?
        let rc = Esys_GetRandom(
            esys, encryptingSession, ESYS_TR(ESYS_TR_NONE), ESYS_TR(ESYS_TR_NONE), UInt16(count), &random)
        defer { scrubResponseBuffer() }
        try check(rc, "Esys_GetRandom")
        let bytes = try takeSecretFromEsys(random, "random bytes")
        guard bytes.count == count else {
            throw TPMError(.other, "The TPM returned \(bytes.count) random bytes instead of \(count)")
        }
        return bytes
    }
}

internal import CTSS2

/// TPM 2.0 Part 3 §15 Symmetric Primitives: TPM2_HMAC.
extension Engine {
    /// The most TPM2_HMAC takes in one command (TPM2B_MAX_BUFFER).
    static let maximumHMACInput = 1024

    /// TPM2_HMAC with `key` (a keyed-hash HMAC-SHA256 key) over `data`: 32 bytes, the response's
    /// first parameter, which comes back encrypted under `session` (encrypt attribute); ESAPI's
    /// buffer is scrubbed.
    func hmac(_ key: ESYS_TR, data: [UInt8], session: ESYS_TR, continueSession: Bool) throws -> SecretBytes {
        guard data.count <= Self.maximumHMACInput else {
            throw TPMError(
                .invalidArgument, "TPM2_HMAC takes at most \(Self.maximumHMACInput) bytes, not \(data.count)")
        }
        return try withZeroedStructure(TPM2B_MAX_BUFFER.self) { buffer in
            try fillSized(buffer, with: data, what: "The data to authenticate")
            try setAttributes(session, encrypt: true, continueSession: continueSession)
            var outHMAC: UnsafeMutablePointer<TPM2B_DIGEST>?
            let rc = Esys_HMAC(
                esys, key, session, ESYS_TR(ESYS_TR_NONE), ESYS_TR(ESYS_TR_NONE), buffer,
                TPMI_ALG_HASH(AlgorithmID.sha256), &outHMAC)
            defer { scrubResponseBuffer() }
            try check(rc, "Esys_HMAC")
            return try takeFromEsys(outHMAC, "HMAC") { (pointer) throws(TPMError) -> SecretBytes in
                defer { secureZero(UnsafeMutableRawPointer(pointer), count: MemoryLayout<TPM2B_DIGEST>.size) }
                guard pointer.pointee.size == 32 else {
                    throw TPMError(.other, "The TPM's HMAC-SHA256 has \(pointer.pointee.size) bytes, not 32")
                }
                let bytes = UnsafeRawPointer(pointer) + MemoryLayout<TPM2B_DIGEST>.offset(of: \.buffer)!
                return SecretBytes(count: 32) { target in
                    target.copyMemory(from: UnsafeRawBufferPointer(start: bytes, count: 32))
                }
            }
        }
    }
}

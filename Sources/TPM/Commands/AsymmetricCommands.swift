internal import CTSS2

/// TPM 2.0 Part 3 §14.5 TPM2_ECDH_ZGen and §20.2 TPM2_Sign, for P-256 keys made in the TPM.
extension Engine {
    /// TPM2_Sign of `digest` (32, 48 or 64 bytes: SHA-256, -384 or -512) with ECDSA, in `session`.
    ///
    /// The key has no scheme of its own, so the command names ECDSA with the digest's hash. An
    /// unrestricted key needs no hash-check ticket (the NULL ticket). Returns r ‖ s, each the
    /// curve's 32 bytes, as swift-crypto's `ECDSASignature(rawRepresentation:)` takes them.
    func sign(_ key: ESYS_TR, digest: [UInt8], session: ESYS_TR, continueSession: Bool) throws -> [UInt8] {
        let hash: UInt16
        switch digest.count {
        case 32: hash = AlgorithmID.sha256
        case 48: hash = AlgorithmID.sha384
        case 64: hash = AlgorithmID.sha512
        default:
            throw TPMError(
                .invalidArgument, "A digest to sign has 32, 48 or 64 bytes (SHA-256, -384, -512), not \(digest.count)")
        }
        return try withZeroedStructure(TPM2B_DIGEST.self) { inDigest in
            try fillSized(inDigest, with: digest, what: "The digest")
            var scheme = TPMT_SIG_SCHEME()
            scheme.scheme = TPMI_ALG_SIG_SCHEME(AlgorithmID.ecdsa)
            scheme.details.ecdsa.hashAlg = TPMI_ALG_HASH(hash)
            var validation = TPMT_TK_HASHCHECK()
            validation.tag = TPM2_ST(0x8024) // TPM_ST_HASHCHECK
            validation.hierarchy = TPMI_RH_HIERARCHY(0x4000_0007) // TPM_RH_NULL: no ticket
            try setAttributes(session, continueSession: continueSession)
            var signature: UnsafeMutablePointer<TPMT_SIGNATURE>?
            try check(
                Esys_Sign(
                    esys, key, session, ESYS_TR(ESYS_TR_NONE), ESYS_TR(ESYS_TR_NONE), inDigest, &scheme, &validation,
                    &signature),
                "Esys_Sign")
            return try takeFromEsys(signature, "signature") { (pointer) throws(TPMError) -> [UInt8] in
                guard pointer.pointee.sigAlg == TPMI_ALG_SIG_SCHEME(AlgorithmID.ecdsa) else {
                    throw TPMError(.other, "The TPM answered with a signature of another scheme")
                }
                var ecdsa = pointer.pointee.signature.ecdsa
                let r = try Self.coordinate(&ecdsa.signatureR, "signature r")
                let s = try Self.coordinate(&ecdsa.signatureS, "signature s")
                return r + s
            }
        }
    }

    /// TPM2_ECDH_ZGen: the x-coordinate of the key's private scalar times `peer` (x and y, 32
    /// bytes each), which is the ECDH shared secret. It is the response's first parameter and
    /// comes back encrypted under `session` (encrypt attribute); ESAPI's buffer is scrubbed.
    func ecdhZGen(
        _ key: ESYS_TR, peerX: [UInt8], peerY: [UInt8], session: ESYS_TR, continueSession: Bool
    ) throws
        -> SecretBytes
    {
        try withZeroedStructure(TPM2B_ECC_POINT.self) { point in
            try withUnsafeMutablePointer(to: &point.pointee.point.x) { x in try fillSized(x, with: peerX, what: "x") }
            try withUnsafeMutablePointer(to: &point.pointee.point.y) { y in try fillSized(y, with: peerY, what: "y") }
            point.pointee.size = UInt16(4 + peerX.count + peerY.count)
            try setAttributes(session, encrypt: true, continueSession: continueSession)
            var outPoint: UnsafeMutablePointer<TPM2B_ECC_POINT>?
            let rc = Esys_ECDH_ZGen(esys, key, session, ESYS_TR(ESYS_TR_NONE), ESYS_TR(ESYS_TR_NONE), point, &outPoint)
            defer { scrubResponseBuffer() }
            try check(rc, "Esys_ECDH_ZGen")
            return try takeFromEsys(outPoint, "shared point") { (pointer) throws(TPMError) -> SecretBytes in
                defer { secureZero(UnsafeMutableRawPointer(pointer), count: MemoryLayout<TPM2B_ECC_POINT>.size) }
                // Copied straight into SecretBytes, left-padded: no array of the secret is left behind.
                let size = Int(pointer.pointee.point.x.size)
                guard size <= 32 else {
                    throw TPMError(.other, "The TPM's shared secret has \(size) bytes, more than P-256's 32")
                }
                let x = UnsafeRawPointer(pointer) + MemoryLayout<TPM2B_ECC_POINT>.offset(of: \.point.x.buffer)!
                return SecretBytes(count: 32) { target in
                    target.initializeMemory(as: UInt8.self, repeating: 0)
                    (target.baseAddress! + 32 - size).copyMemory(from: x, byteCount: size)
                }
            }
        }
    }

    /// A signature half, left-padded to 32 bytes (the TPM drops leading zeros). Not for secrets:
    /// the array is not zeroized.
    private static func coordinate(_ parameter: inout TPM2B_ECC_PARAMETER, _ what: String) throws(TPMError) -> [UInt8] {
        let size = Int(parameter.size)
        guard size <= 32 else { throw TPMError(.other, "The TPM's \(what) has \(size) bytes, more than P-256's 32") }
        let bytes = withUnsafeBytes(of: &parameter.buffer) { Array($0.prefix(size)) }
        return [UInt8](repeating: 0, count: 32 - size) + bytes
    }
}

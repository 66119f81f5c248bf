internal import CTSS2

/// TPM 2.0 Part 3 §23 Enhanced Authorization (EA) Commands: TPM2_PolicyPCR (§23.7),
/// TPM2_PolicyNV (§23.9), TPM2_PolicyCommandCode (§23.11), TPM2_PolicyAuthValue (§23.17) and TPM2_PolicyGetDigest (§23.19).
extension Engine {
    /// Runs `policy`'s assertions, in order, in `session`.
    ///
    /// In a real policy session the TPM checks each condition as it goes: an NV comparison that
    /// does not hold fails here; PCR values are taken as they are now, so changed PCRs surface as a
    /// policy failure when the object is used. In a trial session nothing is checked and the PCR
    /// digest given is used, which is how the TPM confirms digests this layer computed.
    ///
    /// An NV index with an authorization value (`nvAuthorizations`) is read by PolicyNV through
    /// an unsalted HMAC session keyed with it, which the command ends: the value never crosses the
    /// bus, and the TPM's answer is authenticated. Others use an empty password.
    func run(_ policy: Policy, in session: ESYS_TR, trial: Bool, nvAuthorizations: [UInt32: SecretBytes] = [:]) throws {
        for assertion in policy.assertions {
            switch assertion {
            case .authValue:
                try check(
                    Esys_PolicyAuthValue(
                        esys, session, ESYS_TR(ESYS_TR_NONE), ESYS_TR(ESYS_TR_NONE),
                        ESYS_TR(ESYS_TR_NONE)),
                    "Esys_PolicyAuthValue")
            case .nv(let index, _, let operand, let offset, let comparison):
                try withNVIndex(index, authorized: nvAuthorizations[index] != nil) { nvHandle in
                    try withZeroedStructure(TPM2B_OPERAND.self) { operandB in
                        try fillSized(operandB, with: operand, what: "The PolicyNV operand")
                        let what = "Esys_PolicyNV(0x\(String(index, radix: 16)))"
                        guard let authorization = nvAuthorizations[index] else {
                            try check(
                                Esys_PolicyNV(
                                    esys, nvHandle, nvHandle, session, ESYS_TR(ESYS_TR_PASSWORD),
                                    ESYS_TR(ESYS_TR_NONE), ESYS_TR(ESYS_TR_NONE), operandB, offset,
                                    TPM2_EO(comparison.rawValue)), what)
                            return
                        }
                        try setAuthValue(authorization, of: nvHandle)
                        defer { try? setAuthValue(nil, of: nvHandle) }
                        try withHMACSession(saltedWith: nil) { hmac, keep in
                            try setAttributes(hmac, continueSession: keep)
                            try check(
                                Esys_PolicyNV(
                                    esys, nvHandle, nvHandle, session, hmac, ESYS_TR(ESYS_TR_NONE),
                                    ESYS_TR(ESYS_TR_NONE), operandB, offset, TPM2_EO(comparison.rawValue)), what)
                        }
                    }
                }
            case .commandCode(let code):
                try check(
                    Esys_PolicyCommandCode(
                        esys, session, ESYS_TR(ESYS_TR_NONE), ESYS_TR(ESYS_TR_NONE),
                        ESYS_TR(ESYS_TR_NONE), TPM2_CC(code)),
                    "Esys_PolicyCommandCode")
            case .pcrs(let selection, let expectedDigest):
                try withZeroedStructure(TPML_PCR_SELECTION.self) { pcrs in
                    try unmarshal(
                        selection.marshalled, into: pcrs, using: Tss2_MU_TPML_PCR_SELECTION_Unmarshal,
                        "the PCR selection")
                    try withZeroedStructure(TPM2B_DIGEST.self) { pcrDigest in
                        if trial { try fillSized(pcrDigest, with: expectedDigest, what: "The PCR digest") }
                        try check(
                            Esys_PolicyPCR(
                                esys, session, ESYS_TR(ESYS_TR_NONE), ESYS_TR(ESYS_TR_NONE),
                                ESYS_TR(ESYS_TR_NONE), pcrDigest, pcrs),
                            "Esys_PolicyPCR")
                    }
                }
            }
        }
    }

    /// TPM2_PolicyGetDigest: the session's current policy digest.
    func policyDigest(of session: ESYS_TR) throws -> PolicyDigest {
        var digest: UnsafeMutablePointer<TPM2B_DIGEST>?
        try check(
            Esys_PolicyGetDigest(
                esys, session, ESYS_TR(ESYS_TR_NONE), ESYS_TR(ESYS_TR_NONE),
                ESYS_TR(ESYS_TR_NONE), &digest),
            "Esys_PolicyGetDigest")
        return try PolicyDigest(try takeSizedFromEsys(digest, "policy digest"))
    }
}

internal import CTSS2

/// TPM 2.0 Part 3 §24.1 TPM2_CreatePrimary.
extension Engine {
    /// Creates a primary object in the owner hierarchy from `template`, returning its handle and name.
    ///
    /// Nothing secret goes in (empty sensitive area). With an empty owner authorization a password
    /// session is enough; with one, the owner is authorized in an HMAC session, so the password
    /// itself never crosses the bus (unsalted: there is no storage key yet to salt with, so a
    /// recording allows offline guessing of a weak owner password).
    func createPrimary(_ template: PublicTemplate) throws -> (handle: ESYS_TR, name: [UInt8]) {
        do {
            guard let ownerAuthorization = configuration.ownerAuthorization else {
                return try createPrimary(template, session: ESYS_TR(ESYS_TR_PASSWORD))
            }
            try setAuthValue(ownerAuthorization, of: ESYS_TR(ESYS_TR_RH_OWNER))
            defer { try? setAuthValue(nil, of: ESYS_TR(ESYS_TR_RH_OWNER)) }
            let session = try startSession(.hmac, saltedWith: nil)
            defer { flush(session) }
            return try createPrimary(template, session: session)
        } catch let error as TPMError where error.code == .authorizationFailed {
            throw Self.ownerAuthorizationFailed(error)
        }
    }

    private func createPrimary(_ template: PublicTemplate, session: ESYS_TR) throws -> (handle: ESYS_TR, name: [UInt8])
    {
        try withZeroedStructure(TPM2B_SENSITIVE_CREATE.self) { sensitive in
            try withZeroedStructure(TPM2B_PUBLIC.self) { inPublic in
                try unmarshal(
                    template.sizedBytes, into: inPublic, using: Tss2_MU_TPM2B_PUBLIC_Unmarshal,
                    "the storage key template")
                let handle = try withRoomForHandle { () throws(TPMError) -> ESYS_TR in
                    var outsideInfo = TPM2B_DATA()
                    var creationPCR = TPML_PCR_SELECTION()
                    var handle = ESYS_TR(ESYS_TR_NONE)
                    var outPublic: UnsafeMutablePointer<TPM2B_PUBLIC>?
                    var creationData: UnsafeMutablePointer<TPM2B_CREATION_DATA>?
                    var creationHash: UnsafeMutablePointer<TPM2B_DIGEST>?
                    var creationTicket: UnsafeMutablePointer<TPMT_TK_CREATION>?
                    try check(
                        Esys_CreatePrimary(
                            esys, ESYS_TR(ESYS_TR_RH_OWNER), session,
                            ESYS_TR(ESYS_TR_NONE), ESYS_TR(ESYS_TR_NONE), sensitive, inPublic,
                            &outsideInfo, &creationPCR, &handle, &outPublic, &creationData,
                            &creationHash, &creationTicket),
                        "Esys_CreatePrimary")
                    discardFromEsys(outPublic)
                    discardFromEsys(creationData)
                    discardFromEsys(creationHash)
                    discardFromEsys(creationTicket)
                    return handle
                }
                do {
                    return (handle, try name(of: handle))
                } catch {
                    flush(handle)
                    throw error
                }
            }
        }
    }

    /// The name ESAPI holds for `handle`.
    func name(of handle: ESYS_TR) throws -> [UInt8] {
        var name: UnsafeMutablePointer<TPM2B_NAME>?
        try check(Esys_TR_GetName(esys, handle, &name), "Esys_TR_GetName")
        return try takeSizedFromEsys(name, "name")
    }
}

extension Engine {
    /// The owner hierarchy refused its authorization: its own error, since it is the machine's
    /// configuration (an owner password), not a wrong PIN or damaged data.
    static func ownerAuthorizationFailed(_ error: TPMError) -> TPMError {
        TPMError(
            .ownerAuthorizationFailed,
            "The TPM's owner hierarchy has a password, and it was not given or is wrong: set TPM_KEYCHAIN_OWNER_AUTH to it, or TPM_KEYCHAIN_OWNER_AUTH_FILE to a file that holds it",
            operation: error.operation, layer: error.layer, responseCode: error.responseCode,
            decodedResponse: error.decodedResponse)
    }
}

internal import CTSS2

/// TPM 2.0 Part 3 §12 Object Commands: TPM2_Create, TPM2_Load, TPM2_Unseal.
extension Engine {
    /// The most a sealed-data object holds (TPM 2.0 Part 2 MAX_SYM_DATA).
    static let maximumSealedDataSize = 128
    /// An authorization value is at most the size of the object's name-algorithm digest (SHA-256).
    static let maximumAuthValueSize = 32

    /// TPM2_Create of a sealed-data object or a key under `parent`.
    ///
    /// `data` and `authValue` travel in the sensitive area, the command's first parameter, which
    /// the salted `session` encrypts (decrypt attribute). Returns the marshalled TPM2B_PUBLIC and
    /// TPM2B_PRIVATE; the private part is encrypted by the parent and safe to store.
    ///
    /// `data` is nil for a key the TPM makes itself (sensitiveDataOrigin): its sensitive data
    /// must be empty.
    func create(
        under parent: StorageRootKey, template: PublicTemplate, data: SecretBytes?,
        authValue: SecretBytes?, session: ESYS_TR
    ) throws -> (public: [UInt8], private: [UInt8]) {
        if let data, data.count == 0 || data.count > Self.maximumSealedDataSize {
            throw TPMError(
                .invalidArgument, "A sealed secret has 1 to \(Self.maximumSealedDataSize) bytes, not \(data.count)")
        }
        guard (authValue?.count ?? 0) <= Self.maximumAuthValueSize else {
            throw TPMError(.invalidArgument, "An authorization value has at most \(Self.maximumAuthValueSize) bytes")
        }
        return try withZeroedStructure(TPM2B_SENSITIVE_CREATE.self) { sensitive in
            let raw = UnsafeMutableRawPointer(sensitive)
            let authOffset = MemoryLayout<TPM2B_SENSITIVE_CREATE>.offset(of: \.sensitive.userAuth)!
            let dataOffset = MemoryLayout<TPM2B_SENSITIVE_CREATE>.offset(of: \.sensitive.data)!
            if let authValue {
                try authValue.withUnsafeBytes { (bytes) throws(TPMError) in
                    try fillSized(
                        raw + authOffset, structureSize: MemoryLayout<TPM2B_AUTH>.size, with: bytes,
                        what: "The authorization value")
                }
            }
            try data?.withUnsafeBytes { (bytes) throws(TPMError) in
                try fillSized(
                    raw + dataOffset, structureSize: MemoryLayout<TPM2B_SENSITIVE_DATA>.size, with: bytes,
                    what: "The secret")
            }
            return try withZeroedStructure(TPM2B_PUBLIC.self) { inPublic in
                try unmarshal(
                    template.sizedBytes, into: inPublic, using: Tss2_MU_TPM2B_PUBLIC_Unmarshal,
                    "the object template")
                try setAttributes(session, decrypt: true)
                var outsideInfo = TPM2B_DATA()
                var creationPCR = TPML_PCR_SELECTION()
                var outPrivate: UnsafeMutablePointer<TPM2B_PRIVATE>?
                var outPublic: UnsafeMutablePointer<TPM2B_PUBLIC>?
                var creationData: UnsafeMutablePointer<TPM2B_CREATION_DATA>?
                var creationHash: UnsafeMutablePointer<TPM2B_DIGEST>?
                var creationTicket: UnsafeMutablePointer<TPMT_TK_CREATION>?
                try check(
                    Esys_Create(
                        esys, parent.handle, session, ESYS_TR(ESYS_TR_NONE), ESYS_TR(ESYS_TR_NONE),
                        sensitive, inPublic, &outsideInfo, &creationPCR, &outPrivate, &outPublic,
                        &creationData, &creationHash, &creationTicket),
                    "Esys_Create")
                discardFromEsys(creationData)
                discardFromEsys(creationHash)
                discardFromEsys(creationTicket)
                let publicBytes = try takeFromEsys(outPublic, "public area") { pointer throws(TPMError) in
                    try marshal(pointer, using: Tss2_MU_TPM2B_PUBLIC_Marshal, "the sealed object's public area")
                }
                let privateBytes = try takeFromEsys(outPrivate, "private area") { pointer throws(TPMError) in
                    try marshal(pointer, using: Tss2_MU_TPM2B_PRIVATE_Marshal, "the sealed object's private area")
                }
                return (publicBytes, privateBytes)
            }
        }
    }

    /// TPM2_Load of a sealed object's marshalled areas under `parent`; the caller flushes the handle.
    ///
    /// The private area is encrypted to the parent and the parent's authorization is empty, so
    /// nothing secret is sent and a password session suffices.
    func load(under parent: StorageRootKey, publicArea: [UInt8], privateArea: [UInt8]) throws -> ESYS_TR {
        flushObjectAwaitingFlush()
        return try withZeroedStructure(TPM2B_PUBLIC.self) { inPublic in
            try withZeroedStructure(TPM2B_PRIVATE.self) { inPrivate in
                try unmarshal(
                    publicArea, into: inPublic, using: Tss2_MU_TPM2B_PUBLIC_Unmarshal, "the sealed object's public area"
                )
                try unmarshal(
                    privateArea, into: inPrivate, using: Tss2_MU_TPM2B_PRIVATE_Unmarshal,
                    "the sealed object's private area")
                do {
                    return try withRoomForHandle { () throws(TPMError) -> ESYS_TR in
                        var handle = ESYS_TR(ESYS_TR_NONE)
                        try check(
                            Esys_Load(
                                esys, parent.handle, ESYS_TR(ESYS_TR_PASSWORD), ESYS_TR(ESYS_TR_NONE),
                                ESYS_TR(ESYS_TR_NONE), inPrivate, inPublic, &handle),
                            "Esys_Load")
                        return handle
                    }
                } catch let error as TPMError
                    where error.layer == .tpm && error.responseCode & ResponseCodes.format1 != 0
                {
                    // A format-one code names a parameter of ours: the stored areas themselves
                    // (integrity check failed, wrong size, bad attributes), not the TPM's state.
                    throw TPMError(
                        .malformedData,
                        "The TPM refused to load the sealed object: its stored bytes are damaged or were modified",
                        operation: error.operation, layer: error.layer, responseCode: error.responseCode,
                        decodedResponse: error.decodedResponse)
                }
            }
        }
    }

    /// Loads an object (sealed data or a key) and runs `body` with it and a session that
    /// authorizes its use: the connection's salted HMAC session for an object that accepts its
    /// authorization value alone (its policy is then PolicyAuthValue alone), else a salted policy
    /// session in which `policy` was run. `body` sends its one command with continueSession set
    /// to the Bool it gets (a policy session ends with it). The object is flushed afterwards.
    func withAuthorizedObject<R>(
        publicArea: [UInt8], privateArea: [UInt8], storageKeyAlgorithm: StorageKeyAlgorithm,
        storageKeyName: [UInt8], authValueAlone: Bool, policy: Policy, nvAuthorizations: [UInt32: SecretBytes],
        _ body: (ESYS_TR, ESYS_TR, Bool) throws -> R
    ) throws -> R {
        let parent = try storageKey(algorithm: storageKeyAlgorithm, pinnedName: storageKeyName)
        let object = try load(under: parent, publicArea: publicArea, privateArea: privateArea)
        return try withFlushing(object) { object in
            if authValueAlone {
                return try withHMACSession(saltedWith: parent) { session, keep in try body(object, session, keep) }
            }
            return try withSession(.policy, saltedWith: parent) { session, ended in
                try run(policy, in: session, trial: false, nvAuthorizations: nvAuthorizations)
                let result = try body(object, session, false)
                ended = true
                return result
            }
        }
    }

    /// TPM2_Unseal with a satisfied policy session, which the command ends on success, or with
    /// the connection's HMAC session (`keepingSession`) for an object that accepts its
    /// authorization value alone.
    ///
    /// The secret comes back as the response's first parameter, encrypted under the salted session
    /// (encrypt attribute); ESAPI decrypts it into its buffer, which is scrubbed after the copy.
    func unseal(_ object: ESYS_TR, session: ESYS_TR, keepingSession: Bool) throws -> SecretBytes {
        try setAttributes(session, encrypt: true, continueSession: keepingSession)
        var outData: UnsafeMutablePointer<TPM2B_SENSITIVE_DATA>?
        let rc = Esys_Unseal(esys, object, session, ESYS_TR(ESYS_TR_NONE), ESYS_TR(ESYS_TR_NONE), &outData)
        defer { scrubResponseBuffer() }
        try check(rc, "Esys_Unseal")
        return try takeSecretFromEsys(outData, "unsealed data")
    }

    /// Hands ESAPI the authorization value for `handle`'s next HMAC or policy session; nil clears it,
    /// overwriting ESAPI's copy with zeros.
    func setAuthValue(_ authValue: SecretBytes?, of handle: ESYS_TR) throws(TPMError) {
        try withZeroedStructure(TPM2B_AUTH.self) { (auth) throws(TPMError) in
            if let authValue {
                try authValue.withUnsafeBytes { (bytes) throws(TPMError) in
                    try fillSized(auth, with: bytes, what: "The authorization value")
                }
            }
            try check(Esys_TR_SetAuth(esys, handle, auth), "Esys_TR_SetAuth")
        }
    }
}

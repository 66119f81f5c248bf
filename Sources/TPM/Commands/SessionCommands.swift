internal import CTSS2

/// TPM 2.0 Part 3 §11 Session Commands: TPM2_StartAuthSession.
extension Engine {
    enum SessionKind {
        case hmac, policy, trial

        var sessionType: TPM2_SE {
            switch self {
            case .hmac: TPM2_SE(TPM2_SE_HMAC)
            case .policy: TPM2_SE(TPM2_SE_POLICY)
            case .trial: TPM2_SE(TPM2_SE_TRIAL)
            }
        }
    }

    /// Starts a session salted with the storage key (AES-128-CFB parameter encryption, SHA-256).
    ///
    /// The salt is encrypted to the storage key, so the session key is unknown to anyone watching
    /// the bus: parameters encrypted under it and HMACs over a PIN reveal nothing, and a PIN cannot
    /// be attacked offline from a recording. Trial sessions compute digests only and are unsalted.
    func startSession(_ kind: SessionKind, saltedWith key: StorageRootKey?) throws(TPMError) -> ESYS_TR {
        let protected = parameterEncryption && kind != .trial
        var symmetric = TPMT_SYM_DEF()
        if protected {
            symmetric.algorithm = TPMI_ALG_SYM(TPM2_ALG_AES)
            symmetric.keyBits.aes = 128
            symmetric.mode.aes = TPMI_ALG_SYM_MODE(TPM2_ALG_CFB)
        } else {
            symmetric.algorithm = TPMI_ALG_SYM(TPM2_ALG_NULL)
        }
        let tpmKey = protected ? (key?.handle ?? ESYS_TR(ESYS_TR_NONE)) : ESYS_TR(ESYS_TR_NONE)
        return try withRoomForHandle { () throws(TPMError) -> ESYS_TR in
            var session = ESYS_TR(ESYS_TR_NONE)
            try check(
                Esys_StartAuthSession(
                    esys, tpmKey, ESYS_TR(ESYS_TR_NONE), ESYS_TR(ESYS_TR_NONE),
                    ESYS_TR(ESYS_TR_NONE), ESYS_TR(ESYS_TR_NONE), nil, kind.sessionType,
                    &symmetric, TPMI_ALG_HASH(TPM2_ALG_SHA256), &session),
                "Esys_StartAuthSession")
            return session
        }
    }

    /// Sets what the session does on its next command.
    ///
    /// `decrypt` encrypts the command's first parameter, `encrypt` the response's first parameter;
    /// both only when parameter encryption is on. Without `continueSession` the TPM ends the session
    /// when the command succeeds, which saves the round trip of flushing it.
    func setAttributes(
        _ session: ESYS_TR, decrypt: Bool = false, encrypt: Bool = false,
        continueSession: Bool = true
    ) throws(TPMError) {
        // A password "session" has no attributes to set and never encrypts.
        guard session != ESYS_TR(ESYS_TR_PASSWORD), session != ESYS_TR(ESYS_TR_NONE) else { return }
        var flags = TPMA_SESSION(0)
        if continueSession { flags |= TPMA_SESSION(TPMA_SESSION_CONTINUESESSION) }
        if parameterEncryption && decrypt { flags |= TPMA_SESSION(TPMA_SESSION_DECRYPT) }
        if parameterEncryption && encrypt { flags |= TPMA_SESSION(TPMA_SESSION_ENCRYPT) }
        try check(Esys_TRSess_SetAttributes(esys, session, flags, 0xFF), "Esys_TRSess_SetAttributes")
    }

    /// Runs `body` with an HMAC session for one command; `body` sends its command with
    /// continueSession set to the Bool it is given.
    ///
    /// A session asked for with `key` is the connection's: salted with `key` when parameter
    /// encryption is on, started on first use and kept for every later command of the connection.
    /// On a real TPM a StartAuthSession costs as much as several other commands (a salted one
    /// decrypts the salt with the storage key), and one operation sends several NV and sealing
    /// commands. A command that needs no salt uses a kept session when there is one. When there is
    /// none it gets a session of its own that the command ends (continueSession clear), unless a
    /// resource manager will flush a kept one for free at the end: without one, keeping it would
    /// cost a FlushContext when the connection closes, unless another command came to share it.
    ///
    /// A command that fails ends the session's use: it is flushed, so a session whose nonces ESAPI
    /// and the TPM may no longer agree on is never reused.
    ///
    /// `endingKept`: the caller knows this is the connection's last command in a session, so a
    /// kept session it uses ends with it (continueSession clear) instead of being flushed at close:
    /// one command fewer. `body` must send its command with the continueSession it is given.
    func withHMACSession<R>(
        saltedWith key: StorageRootKey?, endingKept: Bool = false, _ body: (ESYS_TR, Bool) throws -> R
    ) throws -> R {
        let salted = key != nil && parameterEncryption
        let session: ESYS_TR
        var keep = true
        var endsKept = false
        if let kept = sharedSessions.salted {
            session = kept
            endsKept = endingKept
        } else if !salted, let kept = sharedSessions.unsalted {
            session = kept
            endsKept = endingKept
        } else if salted {
            session = try startSession(.hmac, saltedWith: key)
            sharedSessions.salted = session
        } else if key != nil || configuration.hasResourceManager {
            session = try startSession(.hmac, saltedWith: nil)
            sharedSessions.unsalted = session
        } else {
            session = try startSession(.hmac, saltedWith: nil)
            keep = false
        }
        if endsKept { keep = false }
        do {
            let result = try body(session, keep)
            if endsKept {
                // The TPM ended it with the command: there is nothing left to flush at close.
                if sharedSessions.salted == session { sharedSessions.salted = nil }
                if sharedSessions.unsalted == session { sharedSessions.unsalted = nil }
            }
            return result
        } catch {
            if sharedSessions.salted == session { sharedSessions.salted = nil }
            if sharedSessions.unsalted == session { sharedSessions.unsalted = nil }
            flush(session)
            throw error
        }
    }

    /// Flushes the connection's kept sessions (at the end of the connection).
    func flushSharedSessions() {
        for session in [sharedSessions.salted, sharedSessions.unsalted].compactMap({ $0 }) { flush(session) }
        sharedSessions = (nil, nil)
    }

    /// Runs `body` with a session that is flushed afterwards unless `body` reports that its last
    /// command ended it (a command sent without continueSession that succeeded).
    func withSession<R>(
        _ kind: SessionKind, saltedWith key: StorageRootKey?,
        _ body: (ESYS_TR, inout Bool) throws -> R
    ) throws -> R {
        let session = try startSession(kind, saltedWith: key)
        var ended = false
        defer { if !ended { flush(session) } }
        return try body(session, &ended)
    }
}

internal import CTSS2
import Crypto
import SystemCalls
import WireFormat

// NV indices: defining, reading, writing and counting, and the names policies assert on.
extension TPMConnection {
    /// Defines an owner NV index (0x01xxxxxx) read and written with `authValue`.
    ///
    /// - Throws: ``TPMError`` `.nvIndexAlreadyDefined` if the handle is taken; `.invalidArgument`
    ///   for ``NVIndexOptions/clearedAtStartup`` on a counter.
    public func defineNVIndex(
        _ index: UInt32, kind: NVIndexKind, authValue: SecretBytes? = nil, options: NVIndexOptions = []
    ) throws {
        if case .counter = kind, options.contains(.clearedAtStartup) {
            throw TPMError(
                .invalidArgument, "A counter cannot be cleared at startup (TPM 2.0 Part 2, TPMA_NV_CLEAR_STCLEAR)")
        }
        try withEngine { engine in
            let definition = NVPublicArea(index: index, kind: kind, options: options)
            if authValue == nil && configuration.ownerAuthorization == nil {
                try engine.defineNVIndex(definition, authValue: nil, session: ESYS_TR(ESYS_TR_PASSWORD))
                return
            }
            let parent = try engine.storageKey(algorithm: nil, pinnedName: nil)
            try engine.withHMACSession(saltedWith: parent) { session, _ in
                try engine.defineNVIndex(definition, authValue: authValue, session: session)
            }
        }
    }

    /// Deletes an NV index. Call it only for indices your program defined.
    ///
    /// - Throws: ``TPMError`` `.handleNotFound` if there is no such index.
    public func undefineNVIndex(_ index: UInt32) throws {
        try withEngine { engine in try engine.undefineNVIndex(index) }
    }

    /// Adds one to an NV counter.
    ///
    /// - Throws: ``TPMError``; `.authorizationFailed` for a wrong `authValue`.
    public func incrementNVCounter(_ index: UInt32, authValue: SecretBytes? = nil) throws {
        try withNVAuthorization(index, authValue: authValue, secretParameters: false) { engine, handle, session, keep in
            try engine.incrementNVCounter(handle, session: session, continueSession: keep)
        }
    }

    /// The NV indices defined in `range`: one TPM2_GetCapability per page of up to 254 handles.
    public func definedNVIndices(in range: Range<UInt32>) throws -> Set<UInt32> {
        try withEngine { engine in Set(try engine.handles(in: range)) }
    }

    /// The value of an NV counter.
    ///
    /// - Parameter endingSessions: this read is the connection's last command in a session: the
    ///   session it shares with earlier commands ends with it (continueSession clear), which saves
    ///   the FlushContext the connection's close would send. A later command starts a new one.
    /// - Throws: ``TPMError`` `.nvIndexUninitialized` before the first increment.
    public func readNVCounter(
        _ index: UInt32, authValue: SecretBytes? = nil, endingSessions: Bool = false
    ) throws -> UInt64 {
        // A counter's value is no secret: without a PIN no salted session (and so no storage key) is needed.
        let bytes = try withNVAuthorization(
            index, authValue: authValue, secretParameters: false, endingKeptSession: endingSessions
        ) { engine, handle, session, keep in
            try engine.readNV(handle, count: 8, offset: 0, session: session, continueSession: keep)
        }
        return bytes.withUnsafeBytes { BigEndian.integer($0) }
    }

    /// Writes secret data to an ordinary NV index; the data is encrypted on the bus.
    ///
    /// - Throws: ``TPMError``.
    public func writeNV(_ index: UInt32, data: SecretBytes, offset: UInt16 = 0, authValue: SecretBytes? = nil) throws {
        try withNVAuthorization(index, authValue: authValue, secretParameters: true) { engine, handle, session, _ in
            try engine.writeNV(handle, data: data, offset: offset, session: session)
        }
    }

    /// Writes NV data that is no secret (a lock state, a flag) in clear: authorized by `authValue`
    /// in an HMAC session, which the authValue never crosses the bus in, but without asking for a
    /// salted session when the connection has none.
    ///
    /// - Throws: ``TPMError``.
    public func writePublicNV(_ index: UInt32, data: [UInt8], offset: UInt16 = 0, authValue: SecretBytes? = nil) throws
    {
        try withNVAuthorization(index, authValue: authValue, secretParameters: false) { engine, handle, session, keep in
            try engine.writeNV(
                handle, data: SecretBytes(copying: data), offset: offset, session: session, continueSession: keep)
        }
    }

    /// Reads NV data; it is encrypted on the bus.
    ///
    /// - Throws: ``TPMError``.
    public func readNV(
        _ index: UInt32, count: UInt16, offset: UInt16 = 0, authValue: SecretBytes? = nil
    ) throws -> SecretBytes {
        try withNVAuthorization(index, authValue: authValue, secretParameters: true) { engine, handle, session, _ in
            try engine.readNV(handle, count: count, offset: offset, session: session)
        }
    }

    /// The attributes (TPMA_NV) the TPM reports for an NV index, or nil when it is not defined.
    ///
    /// - Throws: ``TPMError`` for failures other than an undefined index.
    public func nvIndexAttributes(_ index: UInt32) throws -> UInt32? {
        try withEngine { engine in
            do {
                return try engine.withNVIndex(index, fresh: true) { try engine.nvAttributes(of: $0) }
            } catch let error as TPMError where error.code == .handleNotFound {
                return nil
            }
        }
    }

    /// Reads NV data that is no secret (a lock state, a flag) in clear, without a salted session:
    /// one round trip instead of three.
    ///
    /// - Throws: ``TPMError``.
    public func readPublicNV(
        _ index: UInt32, count: UInt16, offset: UInt16 = 0, authValue: SecretBytes? = nil
    ) throws -> [UInt8] {
        try withNVAuthorization(index, authValue: authValue, secretParameters: false) { engine, handle, session, keep in
            try engine.readNV(handle, count: count, offset: offset, session: session, continueSession: keep)
                .withUnsafeBytes { Array($0) }
        }
    }

    /// Whether the index at `index` is exactly what ``defineNVIndex(_:kind:authValue:options:)``
    /// makes with `kind` and `options` (its name, which covers type, attributes, policy and size,
    /// written or not yet); nil when nothing is defined there. An index someone else defined at a
    /// handle a program chose is told apart this way; one with the same public area and another
    /// authorization value fails its first authorized use instead.
    ///
    /// - Throws: ``TPMError`` for failures other than an undefined index.
    public func nvIndexIsAsDefined(_ index: UInt32, kind: NVIndexKind, options: NVIndexOptions) throws -> Bool? {
        let name: [UInt8]
        do {
            name = try nvIndexName(index)
        } catch let error as TPMError where error.code == .handleNotFound {
            return nil
        }
        let definition = NVPublicArea(index: index, kind: kind, options: options)
        return name == definition.name(written: true) || name == definition.name(written: false)
    }

    /// The name the TPM reports for an NV index (it changes when the index is first written).
    ///
    /// - Throws: ``TPMError`` `.handleNotFound`.
    public func nvIndexName(_ index: UInt32) throws -> [UInt8] {
        try withEngine { engine in try engine.withNVIndex(index, fresh: true) { try engine.name(of: $0) } }
    }

    /// A PolicyNV assertion that the counter at `index` still equals its current value: an object
    /// sealed with it becomes unreadable for good once the counter is incremented.
    ///
    /// - Throws: ``TPMError`` if the counter does not exist or was never incremented.
    public func counterUnchangedAssertion(_ index: UInt32, authValue: SecretBytes? = nil) throws -> PolicyAssertion {
        let value = try readNVCounter(index, authValue: authValue)
        var operand = WireWriter()
        operand.append(value)
        // The name as the read just saw it (its handle is kept): no second NV_ReadPublic.
        let name = try withEngine { engine in try engine.withNVIndex(index) { try engine.name(of: $0) } }
        return .nv(index: index, indexName: name, operand: operand.bytes, offset: 0, comparison: .equal)
    }

    /// Declares what this program defined at `index` (as ``defineNVIndex(_:kind:authValue:options:)``
    /// makes it with `kind` and `options`), for every connection of this process to this TPM: a
    /// command authorized for the index in an HMAC session then names it without reading it first
    /// (one NV_ReadPublic fewer). Nothing is trusted on the strength of it: the TPM checks the
    /// name inside the command's HMAC, and a wrong one makes the connection read the index and
    /// send the command again. Only NO_DA indices are named this way (``NVIndexOptions/noDictionaryAttack``):
    /// for another, a wrong authValue would count twice toward the lockout. Indices this process
    /// defines are declared already.
    public func expectNVIndex(_ index: UInt32, kind: NVIndexKind, options: NVIndexOptions) {
        _ = try? withEngine { engine in
            engine.expect(NVPublicArea(index: index, kind: kind, options: options), at: index)
        }
    }

    /// The name a declared index has once written (``expectNVIndex(_:kind:options:)``), computed
    /// without the TPM; nil when nothing is declared at `index`. A policy asserting on the index
    /// names it so: a wrong name only makes the policy fail, as a changed index would.
    public func expectedNVIndexName(_ index: UInt32) -> [UInt8]? {
        try? withEngine { engine in engine.expectedDefinition(of: index)?.name(written: true) }
    }

    /// Runs one NV command authorised for `index`: with a password session when there is neither
    /// an authValue nor a secret, else in an HMAC session (``Engine/withHMACSession(saltedWith:_:)``);
    /// the body's last argument is the continueSession its command is sent with.
    ///
    /// An authValue with nothing secret in the parameters (a counter read or increment) may use an
    /// unsalted HMAC session: its HMACs are keyed with the authValue, so the TPM's answer is still
    /// authenticated and the authValue never crosses the bus, without the salt's key exchange. The
    /// connection's salted session serves it when there is one.
    ///
    /// `endingKeptSession`: a kept session the command uses ends with it; only for a body that
    /// sends its command with the continueSession it is given.
    private func withNVAuthorization<R: Sendable>(
        _ index: UInt32, authValue: SecretBytes?, secretParameters: Bool, endingKeptSession: Bool = false,
        _ body: (Engine, ESYS_TR, ESYS_TR, Bool) throws -> R
    ) throws -> R {
        try withEngine { engine in
            try engine.withNVIndex(index, authorized: authValue != nil) { handle in
                try engine.setAuthValue(authValue, of: handle)
                defer { try? engine.setAuthValue(nil, of: handle) }
                if authValue == nil && !secretParameters {
                    return try body(engine, handle, ESYS_TR(ESYS_TR_PASSWORD), true)
                }
                let parent = secretParameters ? try engine.storageKey(algorithm: nil, pinnedName: nil) : nil
                return try engine.withHMACSession(saltedWith: parent, endingKept: endingKeptSession) {
                    session, keep in try body(engine, handle, session, keep)
                }
            }
        }
    }
}

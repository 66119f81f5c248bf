internal import CTSS2
import SystemCalls
import WireFormat

#if canImport(Glibc)
import Glibc
#endif

/// What an NV index holds.
public enum NVIndexKind: Sendable, Hashable {
    /// A 64-bit monotonic counter (TPM_NT_COUNTER). It only goes up, and a counter defined anew
    /// starts at the highest value any counter on this TPM has held, so deleting and re-creating
    /// it cannot bring an old value back.
    case counter
    /// `size` bytes of ordinary storage (TPM_NT_ORDINARY).
    case ordinary(size: UInt16)
}

/// How an NV index behaves beyond its kind (TPMA_NV bits, TPM 2.0 Part 2 §13.4).
public struct NVIndexOptions: OptionSet, Sendable, Hashable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    /// TPMA_NV_NO_DA: failed authorizations of the index do not count toward the TPM's
    /// dictionary-attack lockout, and the index stays usable during a lockout. Right for indices
    /// whose authorization is empty or a high-entropy key: a lockout must never make them, or the
    /// policies that read them, unusable.
    public static let noDictionaryAttack = NVIndexOptions(rawValue: 0x0200_0000)
    /// TPMA_NV_CLEAR_STCLEAR: the index reads as never written after every TPM Reset or Restart
    /// (a reboot). Not for counters.
    public static let clearedAtStartup = NVIndexOptions(rawValue: 0x0800_0000)
}

/// TPMS_NV_PUBLIC (TPM 2.0 Part 2 §13.5) as this layer defines NV indices: owner-created,
/// read and written with the index's own authorization value. Never TPMA_NV_ORDERLY: after an
/// unclean stop an orderly counter jumps ahead, which would break equality policies on it.
struct NVPublicArea {
    static let authWrite: UInt32 = 0x0000_0004
    static let counterType: UInt32 = 0x0000_0010 // TPM_NT_COUNTER in bits 4-7
    static let authRead: UInt32 = 0x0004_0000
    static let written: UInt32 = 0x2000_0000

    let index: UInt32
    let kind: NVIndexKind
    var options: NVIndexOptions = []

    var attributes: UInt32 {
        var value = Self.authWrite | Self.authRead | options.rawValue
        if case .counter = kind { value |= Self.counterType }
        return value
    }

    var dataSize: UInt16 {
        switch kind {
        case .counter: 8
        case .ordinary(let size): size
        }
    }

    func marshalled(written: Bool) -> [UInt8] {
        var writer = WireWriter()
        writer.append(index)
        writer.append(AlgorithmID.sha256)
        writer.append(attributes | (written ? Self.written : 0))
        writer.appendSized([])
        writer.append(dataSize)
        return writer.bytes
    }

    /// The index's name; it changes once the index is first written (TPMA_NV_WRITTEN).
    func name(written: Bool) -> [UInt8] {
        ObjectName.sha256(ofPublicArea: marshalled(written: written))
    }
}

/// TPM 2.0 Part 3 §31 Non-volatile Storage: TPM2_NV_DefineSpace (§31.3), TPM2_NV_UndefineSpace
/// (§31.4), TPM2_NV_ReadPublic (§31.6), TPM2_NV_Write (§31.7), TPM2_NV_Increment (§31.8) and
/// TPM2_NV_Read (§31.13).
extension Engine {
    /// Owner indices live in 0x01000000-0x01FFFFFF (TPM 2.0 Part 2 §7.3, TPM_HT_NV_INDEX).
    static func checkOwnerIndex(_ index: UInt32) throws(TPMError) {
        guard index >> 24 == 0x01 else {
            throw TPMError(
                .invalidArgument, "NV index 0x\(String(index, radix: 16)) is not an NV index handle (0x01xxxxxx)")
        }
    }

    /// Runs `body` with an ESAPI handle for an existing NV index.
    ///
    /// The handle (the index's public area and name, one NV_ReadPublic) is kept for the rest of
    /// the connection: a connection serves one operation, and the commands of one operation
    /// often name the same index two to five times. ESAPI updates a kept handle's name itself
    /// when this connection first writes the index. A handle is dropped when a command using it
    /// fails (the index may have changed under it: the next use reads it again).
    ///
    /// `authorized` says that `body` sends a command authorized for the index in an HMAC
    /// session. Its HMAC covers the index's name as the TPM knows it, so a handle built from the
    /// definition this process expects there (``expectedNVIndices``, no TPM command) is checked
    /// by the TPM itself: a wrong name fails the command's authorization, and then the index is
    /// read and `body` runs once more. A password session checks no name, so it never gets one;
    /// nor does an index whose failed authorizations count toward the dictionary-attack lockout,
    /// since a wrong authValue would then count twice.
    ///
    /// `fresh` asks for a name the TPM vouched for in this connection (read from it, or confirmed
    /// by an authorized command), for the checks that compare it with a definition.
    func withNVIndex<R>(
        _ index: UInt32, fresh: Bool = false, authorized: Bool = false, _ body: (ESYS_TR) throws -> R
    ) throws -> R {
        try Self.checkOwnerIndex(index)
        if fresh && !confirmedNVIndices.contains(index) { forgetNVIndex(index) }
        let handle: ESYS_TR
        var builtFromDefinition = false
        if let kept = nvHandles[index] {
            handle = kept
        } else if authorized, let definition = expectedDefinition(of: index),
            definition.options.contains(.noDictionaryAttack), let built = handleWithoutTPM(for: definition)
        {
            nvHandles[index] = built
            handle = built
            builtFromDefinition = true
        } else {
            let read = try readNVHandle(index)
            nvHandles[index] = read
            confirmedNVIndices.insert(index)
            handle = read
        }
        do {
            let result = try body(handle)
            if authorized { confirmedNVIndices.insert(index) }
            return result
        } catch let error as TPMError where builtFromDefinition && error.code == .authorizationFailed {
            // The index is not what this process expects there (redefined, or not written since
            // the TPM's startup): read it and try once more, as without the expectation.
            forgetNVIndex(index)
            return try withNVIndex(index, fresh: true, authorized: false, body)
        } catch {
            forgetNVIndex(index)
            throw error
        }
    }

    /// A new ESAPI handle for the index, from its public area as the TPM reports it (TPM2_NV_ReadPublic).
    private func readNVHandle(_ index: UInt32) throws(TPMError) -> ESYS_TR {
        var handle = ESYS_TR(ESYS_TR_NONE)
        try check(
            Esys_TR_FromTPMPublic(
                esys, index, ESYS_TR(ESYS_TR_NONE), ESYS_TR(ESYS_TR_NONE), ESYS_TR(ESYS_TR_NONE), &handle),
            "Esys_TR_FromTPMPublic(0x\(String(index, radix: 16)))")
        return handle
    }

    /// An ESAPI handle for `definition`, written, made without the TPM (Esys_TR_Deserialize of
    /// the IESYS_RESOURCE serialization: handle, name, resource type 2 for NV, TPM2B_NV_PUBLIC);
    /// nil if this ESAPI does not take it.
    func handleWithoutTPM(for definition: NVPublicArea) -> ESYS_TR? {
        var handle = ESYS_TR(ESYS_TR_NONE)
        let bytes = Self.serializedResource(of: definition)
        let rc = bytes.withUnsafeBufferPointer { Esys_TR_Deserialize(esys, $0.baseAddress, $0.count, &handle) }
        return rc == TSS2_RC_SUCCESS ? handle : nil
    }

    static func serializedResource(of definition: NVPublicArea) -> [UInt8] {
        let publicArea = definition.marshalled(written: true)
        var writer = WireWriter()
        writer.append(definition.index)
        writer.appendSized(ObjectName.sha256(ofPublicArea: publicArea))
        writer.append(UInt32(2)) // IESYSC_NV_RSRC
        writer.appendSized(publicArea)
        return writer.bytes
    }

    /// The ESAPI serialization of a kept handle (tests compare it with ``handleWithoutTPM(for:)``'s input).
    func serializedHandle(_ handle: ESYS_TR) throws -> [UInt8] {
        var buffer: UnsafeMutablePointer<UInt8>?
        var size = 0
        try check(Esys_TR_Serialize(esys, handle, &buffer, &size), "Esys_TR_Serialize")
        defer { free(buffer) }
        guard let buffer else { return [] }
        return Array(UnsafeBufferPointer(start: buffer, count: size))
    }

    /// Closes the kept handle of `index` (no TPM command).
    func forgetNVIndex(_ index: UInt32) {
        confirmedNVIndices.remove(index)
        guard var handle = nvHandles.removeValue(forKey: index) else { return }
        _ = Esys_TR_Close(esys, &handle)
    }

    /// Defines an NV index in the owner hierarchy. Its authorization value is the first parameter
    /// and travels encrypted under the salted session.
    func defineNVIndex(_ definition: NVPublicArea, authValue: SecretBytes?, session: ESYS_TR) throws {
        try Self.checkOwnerIndex(definition.index)
        try withZeroedStructure(TPM2B_AUTH.self) { auth in
            if let authValue {
                try authValue.withUnsafeBytes { (bytes) throws(TPMError) in
                    try fillSized(auth, with: bytes, what: "The NV authorization value")
                }
            }
            try withZeroedStructure(TPM2B_NV_PUBLIC.self) { publicInfo in
                var writer = WireWriter()
                writer.appendSized(definition.marshalled(written: false))
                try unmarshal(
                    writer.bytes, into: publicInfo, using: Tss2_MU_TPM2B_NV_PUBLIC_Unmarshal, "the NV public area")
                try setAttributes(session, decrypt: true)
                try setAuthValue(configuration.ownerAuthorization, of: ESYS_TR(ESYS_TR_RH_OWNER))
                defer { try? setAuthValue(nil, of: ESYS_TR(ESYS_TR_RH_OWNER)) }
                var handle = ESYS_TR(ESYS_TR_NONE)
                let rc = Esys_NV_DefineSpace(
                    esys, ESYS_TR(ESYS_TR_RH_OWNER), session, ESYS_TR(ESYS_TR_NONE),
                    ESYS_TR(ESYS_TR_NONE), auth, publicInfo, &handle)
                try Self.checkOwner(rc, "Esys_NV_DefineSpace(0x\(String(definition.index, radix: 16)))")
                // Kept: ESAPI made it from the public area just defined, so no read is needed.
                forgetNVIndex(definition.index)
                nvHandles[definition.index] = handle
                confirmedNVIndices.insert(definition.index)
                expect(definition, at: definition.index)
            }
        }
    }

    /// Removes an NV index, with owner authorization (empty).
    func undefineNVIndex(_ index: UInt32) throws {
        try Self.checkOwnerIndex(index)
        forgetNVIndex(index)
        expect(nil, at: index)
        var handle = try readNVHandle(index)
        try setAuthValue(configuration.ownerAuthorization, of: ESYS_TR(ESYS_TR_RH_OWNER))
        defer { try? setAuthValue(nil, of: ESYS_TR(ESYS_TR_RH_OWNER)) }
        // With an owner password, an HMAC session: the password never crosses the bus.
        let target = handle
        let rc: TSS2_RC
        if configuration.ownerAuthorization == nil {
            rc = Esys_NV_UndefineSpace(
                esys, ESYS_TR(ESYS_TR_RH_OWNER), target, ESYS_TR(ESYS_TR_PASSWORD), ESYS_TR(ESYS_TR_NONE),
                ESYS_TR(ESYS_TR_NONE))
        } else {
            let session = try startSession(.hmac, saltedWith: nil)
            rc = Esys_NV_UndefineSpace(
                esys, ESYS_TR(ESYS_TR_RH_OWNER), target, session, ESYS_TR(ESYS_TR_NONE), ESYS_TR(ESYS_TR_NONE))
            flush(session)
        }
        if rc != TSS2_RC_SUCCESS { _ = Esys_TR_Close(esys, &handle) }
        try Self.checkOwner(rc, "Esys_NV_UndefineSpace(0x\(String(index, radix: 16)))")
    }

    /// TPM2_NV_Increment, authorised by the index's value through `session`.
    func incrementNVCounter(_ nvHandle: ESYS_TR, session: ESYS_TR, continueSession: Bool = true) throws {
        try setAttributes(session, continueSession: continueSession)
        try check(
            Esys_NV_Increment(esys, nvHandle, nvHandle, session, ESYS_TR(ESYS_TR_NONE), ESYS_TR(ESYS_TR_NONE)),
            "Esys_NV_Increment")
    }

    /// TPM2_NV_Write of `data` at `offset`; the data is the first parameter and travels encrypted.
    func writeNV(
        _ nvHandle: ESYS_TR, data: SecretBytes, offset: UInt16, session: ESYS_TR, continueSession: Bool = true
    ) throws {
        try withZeroedStructure(TPM2B_MAX_NV_BUFFER.self) { buffer in
            try data.withUnsafeBytes { (bytes) throws(TPMError) in
                try fillSized(buffer, with: bytes, what: "The NV data")
            }
            try setAttributes(session, decrypt: true, continueSession: continueSession)
            try check(
                Esys_NV_Write(
                    esys, nvHandle, nvHandle, session, ESYS_TR(ESYS_TR_NONE), ESYS_TR(ESYS_TR_NONE),
                    buffer, offset),
                "Esys_NV_Write")
        }
    }

    /// TPM2_NV_Read of `count` bytes at `offset`; the data comes back encrypted.
    func readNV(
        _ nvHandle: ESYS_TR, count: UInt16, offset: UInt16, session: ESYS_TR, continueSession: Bool = true
    ) throws -> SecretBytes {
        try setAttributes(session, encrypt: true, continueSession: continueSession)
        var data: UnsafeMutablePointer<TPM2B_MAX_NV_BUFFER>?
        let rc = Esys_NV_Read(
            esys, nvHandle, nvHandle, session, ESYS_TR(ESYS_TR_NONE), ESYS_TR(ESYS_TR_NONE),
            count, offset, &data)
        defer { scrubResponseBuffer() }
        try check(rc, "Esys_NV_Read")
        return try takeSecretFromEsys(data, "NV data")
    }
}

extension Engine {
    /// The index's TPMA_NV as the TPM reported it when the handle was read (TPM2_NV_ReadPublic),
    /// TPMA_NV_WRITTEN included and kept current by ESAPI when this connection writes the index.
    func nvAttributes(of nvHandle: ESYS_TR) throws -> UInt32 {
        // From ESAPI's record of the index (its serialization: handle, name, resource type, then
        // TPM2B_NV_PUBLIC: size, nvIndex, nameAlg, attributes), read when the handle was made:
        // no second NV_ReadPublic.
        var reader = WireReader(try serializedHandle(nvHandle))
        do throws(WireFormatError) {
            _ = try reader.readUInt32()
            _ = try reader.readSized(maximum: 66)
            guard try reader.readUInt32() == 2 else { throw WireFormatError("not an NV resource") }
            _ = try reader.readUInt16()
            _ = try reader.readUInt32()
            _ = try reader.readUInt16()
            return try reader.readUInt32()
        } catch {
            throw TPMError(.other, "ESAPI's record of the NV index is not as expected: \(error.message)")
        }
    }
}

extension Engine {
    /// `check` for a command the owner hierarchy authorizes: a refused authorization is the owner's
    /// password (missing or wrong), its own error.
    static func checkOwner(_ rc: TSS2_RC, _ operation: String) throws(TPMError) {
        do {
            try check(rc, operation)
        } catch  where error.code == .authorizationFailed {
            throw ownerAuthorizationFailed(error)
        }
    }
}

extension Engine {
    /// What this process expects at NV handles, by TPM (TCTI): the indices it defined, and those
    /// its callers declared with ``TPMConnection/expectNVIndex(_:kind:options:)``.
    private static let expectedNVIndices = Locked<[String: [UInt32: NVPublicArea]]>([:])

    func expectedDefinition(of index: UInt32) -> NVPublicArea? {
        Self.expectedNVIndices.withLock { $0[configuration.tcti]?[index] }
    }

    func expect(_ definition: NVPublicArea?, at index: UInt32) {
        Self.expectedNVIndices.withLock { $0[configuration.tcti, default: [:]][index] = definition }
    }
}

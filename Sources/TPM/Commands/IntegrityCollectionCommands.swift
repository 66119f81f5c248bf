internal import CTSS2
import WireFormat

/// TPM 2.0 Part 3 §22 Integrity Collection (PCR): TPM2_PCR_Extend (§22.2) and TPM2_PCR_Read (§22.4).
extension Engine {
    /// The current SHA-256 values of the selected PCRs, in ascending index order.
    func readPCRs(_ selection: PCRSelection) throws -> [[UInt8]] {
        try withZeroedStructure(TPML_PCR_SELECTION.self) { pcrs in
            try unmarshal(
                selection.marshalled, into: pcrs, using: Tss2_MU_TPML_PCR_SELECTION_Unmarshal, "the PCR selection")
            var updateCounter: UInt32 = 0
            var selectionOut: UnsafeMutablePointer<TPML_PCR_SELECTION>?
            var values: UnsafeMutablePointer<TPML_DIGEST>?
            try check(
                Esys_PCR_Read(
                    esys, ESYS_TR(ESYS_TR_NONE), ESYS_TR(ESYS_TR_NONE), ESYS_TR(ESYS_TR_NONE),
                    pcrs, &updateCounter, &selectionOut, &values),
                "Esys_PCR_Read")
            discardFromEsys(selectionOut)
            return try takeFromEsys(values, "PCR values") { (list) throws(TPMError) -> [[UInt8]] in
                let raw = UnsafeRawPointer(list)
                let count = Int(raw.load(as: UInt32.self))
                let digestsOffset = MemoryLayout<TPML_DIGEST>.offset(of: \.digests)!
                guard count == selection.indices.count else {
                    throw TPMError(
                        .other,
                        "The TPM returned \(count) PCR values for \(selection.indices.count) PCRs (is the SHA-256 bank allocated?)"
                    )
                }
                var result: [[UInt8]] = []
                for index in 0..<count {
                    let entry = raw + digestsOffset + index * MemoryLayout<TPM2B_DIGEST>.stride
                    result.append(Array(try sizedBytes(entry, structureSize: MemoryLayout<TPM2B_DIGEST>.size)))
                }
                return result
            }
        }
    }

    /// Extends a SHA-256 PCR with `digest` (PCR authorization is empty for the resettable PCRs).
    func extendPCR(_ index: Int, with digest: [UInt8]) throws {
        guard (0...23).contains(index), digest.count == 32 else {
            throw TPMError(.invalidArgument, "PCR_Extend takes a PCR 0-23 and a 32-byte SHA-256 digest")
        }
        try withZeroedStructure(TPML_DIGEST_VALUES.self) { values in
            var writer = WireWriter()
            writer.append(UInt32(1))
            writer.append(AlgorithmID.sha256)
            writer.append(raw: digest)
            try unmarshal(writer.bytes, into: values, using: Tss2_MU_TPML_DIGEST_VALUES_Unmarshal, "the PCR digest")
            try check(
                Esys_PCR_Extend(
                    esys, ESYS_TR(ESYS_TR_PCR0) + ESYS_TR(index), ESYS_TR(ESYS_TR_PASSWORD),
                    ESYS_TR(ESYS_TR_NONE), ESYS_TR(ESYS_TR_NONE), values),
                "Esys_PCR_Extend")
        }
    }
}

/// TPM 2.0 Part 3 §29.2 TPM2_ReadClock.
extension Engine {
    /// TPMS_CLOCK_INFO.resetCount and restartCount: both change when the TPM resets or restarts
    /// (a reboot, a simulator power cycle).
    func startupCounts() throws -> (reset: UInt32, restart: UInt32) {
        var time: UnsafeMutablePointer<TPMS_TIME_INFO>?
        try check(
            Esys_ReadClock(esys, ESYS_TR(ESYS_TR_NONE), ESYS_TR(ESYS_TR_NONE), ESYS_TR(ESYS_TR_NONE), &time),
            "Esys_ReadClock")
        let counts = (time?.pointee.clockInfo.resetCount ?? 0, time?.pointee.clockInfo.restartCount ?? 0)
        discardFromEsys(time)
        return counts
    }
}

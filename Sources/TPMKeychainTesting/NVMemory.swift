import TPM

/// Fills a TPM's NV memory, as any user of the TPM can, for tests of what happens when there is
/// no room for a counter. Package-only.
package enum NVMemory {
    /// The handles the filler indices take: outside every range TPMKeychain uses.
    package static let fillerBase: UInt32 = 0x01C1_0000

    /// Defines indices until the TPM has no room for another counter: big ones first, then
    /// smaller ones into what is left, then counters.
    ///
    /// - Returns: the handles defined, to undefine with ``release(_:tcti:)``.
    /// - Throws: ``TPMError`` other than running out of room; `Failure` when the TPM never filled up.
    package static func fill(tcti: String) throws -> [UInt32] {
        let tpm = try TPMConnection(TPMConfiguration(tcti: tcti, ownerAuthorization: nil))
        defer { tpm.close() }
        var defined: [UInt32] = []
        var full = false
        for kind: NVIndexKind in [.ordinary(size: 1024), .ordinary(size: 64), .ordinary(size: 1), .counter] {
            full = false
            while defined.count < 0x4000 {
                let handle = fillerBase + UInt32(defined.count)
                do {
                    try tpm.defineNVIndex(handle, kind: kind)
                    defined.append(handle)
                } catch let error as TPMError where error.code == .nvSpaceExhausted || error.code == .outOfResources {
                    full = true
                    break
                }
            }
        }
        guard full else {
            throw SystemTool.Failure(
                description: "the TPM at \(tcti) took \(defined.count) NV indices and still had room")
        }
        return defined
    }

    /// Undefines what ``fill(tcti:)`` defined.
    package static func release(_ handles: [UInt32], tcti: String) throws {
        let tpm = try TPMConnection(TPMConfiguration(tcti: tcti, ownerAuthorization: nil))
        defer { tpm.close() }
        for handle in handles { try tpm.undefineNVIndex(handle) }
    }
}

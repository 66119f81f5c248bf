internal import CTSS2

/// TPM 2.0 Part 3 §30.2 TPM2_GetCapability.
extension Engine {
    /// The handles of one type currently in use, starting at `first` (same handle type only):
    /// the first page the TPM returns.
    func handles(from first: UInt32) throws -> [UInt32] {
        try handlePage(from: first).handles
    }

    /// Every handle in use in `range` (one handle type), page by page as the TPM returns them.
    func handles(in range: Range<UInt32>) throws -> [UInt32] {
        var found: [UInt32] = []
        var next = range.lowerBound
        while next < range.upperBound {
            let page = try handlePage(from: next)
            found += page.handles.filter { range.contains($0) }
            guard page.more, let last = page.handles.last, last >= next, last < range.upperBound - 1 else { break }
            next = last + 1
        }
        return found
    }

    private func handlePage(from first: UInt32) throws -> (handles: [UInt32], more: Bool) {
        var capability: UnsafeMutablePointer<TPMS_CAPABILITY_DATA>?
        var more: TPMI_YES_NO = 0
        try check(
            Esys_GetCapability(
                esys, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE,
                TPM2_CAP(TPM2_CAP_HANDLES), first, HandleRange.maximumCapabilityHandles, &more, &capability),
            "Esys_GetCapability(handles)")
        let handles = try takeFromEsys(capability, "capability data") { data in
            let list = UnsafeMutableRawPointer(data) + MemoryLayout<TPMS_CAPABILITY_DATA>.offset(of: \.data)!
            let count = min(Int(list.load(as: UInt32.self)), Int(HandleRange.maximumCapabilityHandles))
            return (0..<count)
                .map { (list + 4 + $0 * 4).loadUnaligned(as: UInt32.self) }
                .filter { Self.sameHandleKind($0, first) }
        }
        return (handles, more != 0)
    }

    /// Sessions are listed by state (loaded from 0x02000000, saved from 0x03000000) but keep the
    /// type byte of their kind (0x02 HMAC, 0x03 policy), so either may come back for either query.
    private static func sameHandleKind(_ handle: UInt32, _ first: UInt32) -> Bool {
        let (kind, queried) = (handle >> 24, first >> 24)
        if queried == 0x02 || queried == 0x03 { return kind == 0x02 || kind == 0x03 }
        return kind == queried
    }

    /// TPM properties (TPM_PT) starting at `first`, as (property, value) pairs.
    func properties(from first: UInt32, count: UInt32) throws -> [UInt32: UInt32] {
        var capability: UnsafeMutablePointer<TPMS_CAPABILITY_DATA>?
        var more: TPMI_YES_NO = 0
        try check(
            Esys_GetCapability(
                esys, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE,
                TPM2_CAP(TPM2_CAP_TPM_PROPERTIES), first, count, &more, &capability),
            "Esys_GetCapability(properties)")
        return try takeFromEsys(capability, "capability data") { data in
            let list = UnsafeMutableRawPointer(data) + MemoryLayout<TPMS_CAPABILITY_DATA>.offset(of: \.data)!
            let found = min(Int(list.load(as: UInt32.self)), Int(HandleRange.maximumCapabilityProperties))
            var result: [UInt32: UInt32] = [:]
            for index in 0..<found {
                let entry = list + 4 + index * 8
                result[entry.loadUnaligned(as: UInt32.self)] = (entry + 4).loadUnaligned(as: UInt32.self)
            }
            return result
        }
    }
}

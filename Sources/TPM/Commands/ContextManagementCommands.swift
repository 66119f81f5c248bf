internal import CTSS2
import Logging

/// TPM 2.0 Part 3 §28 Context Management: TPM2_ContextSave (§28.2), TPM2_ContextLoad (§28.3) and
/// TPM2_FlushContext (§28.4) of handles a crashed process left.
extension Engine {
    /// The TPM context of a loaded transient object, marshalled (TPMS_CONTEXT with ESAPI's
    /// metadata in its blob). The object stays loaded.
    func saveContext(_ handle: ESYS_TR) throws -> [UInt8] {
        var context: UnsafeMutablePointer<TPMS_CONTEXT>?
        try check(Esys_ContextSave(esys, handle, &context), "Esys_ContextSave")
        return try takeFromEsys(context, "context") { pointer throws(TPMError) in
            try marshal(pointer, using: Tss2_MU_TPMS_CONTEXT_Marshal, "the saved context")
        }
    }

    /// Loads a context `saveContext` produced. The TPM refuses one from another TPM, another
    /// owner hierarchy, or before its last reset.
    func loadContext(_ bytes: [UInt8]) throws -> ESYS_TR {
        try withZeroedStructure(TPMS_CONTEXT.self) { context in
            try unmarshal(bytes, into: context, using: Tss2_MU_TPMS_CONTEXT_Unmarshal, "a saved context")
            return try withRoomForHandle { () throws(TPMError) -> ESYS_TR in
                var handle = ESYS_TR(ESYS_TR_NONE)
                try check(Esys_ContextLoad(esys, context, &handle), "Esys_ContextLoad")
                return handle
            }
        }
    }

    /// With no resource manager the TPM still holds whatever a process that died left loaded,
    /// and swtpm has only three object slots. Holding the access lock means no other live process
    /// owns anything loaded now, so all of it is stale, except what this connection loaded itself
    /// (`kept`, when the sweep runs late: see ``withRoomForHandle(_:)``).
    func flushStaleHandles(keeping kept: Set<TPM2_HANDLE> = []) throws {
        let sys = try systemContext()
        var flushed: [UInt32] = []
        // One query says whether anything is in the way: sessions left behind, or too few free
        // object slots for this connection's work. Only then are handles listed and flushed, so a
        // clean TPM costs one command here. (Stale objects on a TPM with slots to spare stay
        // until they crowd it; they hold no secret and the next sweep that needs room flushes them.)
        let counts = try properties(from: TPMProperty.loadedSessions, count: 5)
        let sessionsLeft =
            (counts[TPMProperty.loadedSessions] ?? 1) > 0 || (counts[TPMProperty.activeSessions] ?? 1) > 0
        let objectsInTheWay = (counts[TPMProperty.transientAvailable] ?? 0) < TPMProperty.transientObjectsNeeded
        var ranges: [UInt32] = objectsInTheWay ? [HandleRange.transientFirst] : []
        if sessionsLeft { ranges += [HandleRange.loadedSessionFirst, HandleRange.activeSessionFirst] }
        for first in ranges {
            for handle in try handles(from: first) where !kept.contains(handle) {
                // A session may already have gone; what matters is that nothing stays loaded.
                _ = Tss2_Sys_FlushContext(sys, handle)
                flushed.append(handle)
            }
        }
        if !flushed.isEmpty {
            configuration.logger.debug(
                "flushed handles a crashed process left",
                metadata: [
                    "tcti": "\(configuration.tcti)", "handles": "\(flushed.map { "0x" + String($0, radix: 16) })",
                ])
        }
    }
}

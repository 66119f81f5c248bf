internal import CTSS2
import Logging

/// TPM 2.0 Part 3 §28 Context Management: TPM2_FlushContext of handles a crashed process left.
extension Engine {
    /// With no resource manager the TPM still holds whatever a process that died left loaded,
    /// and swtpm has only three object slots. Holding the access lock means no other live process
    /// owns anything loaded now, so all of it is stale.
    func flushStaleHandles() throws {
        let sys = try systemContext()
        var flushed: [UInt32] = []
        for first in [HandleRange.transientFirst, HandleRange.loadedSessionFirst, HandleRange.activeSessionFirst] {
            for handle in try handles(from: first) {
                // A session may already have gone; what matters is that nothing stays loaded.
                _ = Tss2_Sys_FlushContext(sys, handle)
                flushed.append(handle)
            }
        }
        if !flushed.isEmpty {
            tpmLogger.debug("flushed handles a crashed process left", metadata: [
                "tcti": "\(configuration.tcti)", "handles": "\(flushed.map { "0x" + String($0, radix: 16) })"])
        }
    }
}

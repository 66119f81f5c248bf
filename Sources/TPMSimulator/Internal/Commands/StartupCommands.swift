// TPM 2.0 Part 3 §9 "Start-up": TPM2_Startup (§9.3) and TPM2_Shutdown (§9.4).

enum StartupCommands {
    static let startupCode: UInt32 = 0x0000_0144 // TPM_CC_Startup
    static let shutdownCode: UInt32 = 0x0000_0145 // TPM_CC_Shutdown

    /// TPM2_Startup(TPM_SU_CLEAR): a fresh boot; all transient objects and sessions are gone.
    static func startupClear() -> [UInt8] {
        TPMCommandBuilder(code: startupCode).appending(TPMConstant.shutdownClear).build()
    }

    /// TPM2_Shutdown(TPM_SU_CLEAR): an orderly shutdown, so the next start-up does not count a
    /// dictionary-attack failure (an unorderly one would, when lockout is enabled).
    static func shutdownClear() -> [UInt8] {
        TPMCommandBuilder(code: shutdownCode).appending(TPMConstant.shutdownClear).build()
    }

    /// TPM2_Shutdown(TPM_SU_STATE): an orderly shutdown that saves the TPM's state, so that a
    /// start with TPM2_Startup(SU_STATE) resumes it (TPM 2.0 Part 1 §12.2: a TPM Resume) rather
    /// than reboots it.
    static func shutdownState() -> [UInt8] {
        TPMCommandBuilder(code: shutdownCode).appending(TPMConstant.shutdownState).build()
    }
}

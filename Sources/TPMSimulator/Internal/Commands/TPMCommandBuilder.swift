// Marshals the handful of fixed-shape TPM 2.0 commands the simulator sends itself
// (TPM 2.0 Part 1 §18.2 command layout, Part 2 for the constants). Everything is big-endian.

import SystemCalls
import WireFormat

/// TPM 2.0 Part 2 constants used by the simulator's own commands.
enum TPMConstant {
    static let tagNoSessions: UInt16 = 0x8001 // TPM_ST_NO_SESSIONS
    static let tagSessions: UInt16 = 0x8002 // TPM_ST_SESSIONS
    static let passwordSession: UInt32 = 0x4000_0009 // TPM_RS_PW
    static let lockoutHierarchy: UInt32 = 0x4000_000A // TPM_RH_LOCKOUT
    static let shutdownClear: UInt16 = 0x0000 // TPM_SU_CLEAR
    static let shutdownState: UInt16 = 0x0001 // TPM_SU_STATE
    static let notInitialized: UInt32 = 0x0000_0100 // TPM_RC_INITIALIZE
}

/// Builds one command buffer: header, handles, optional password authorization, parameters.
struct TPMCommandBuilder {
    private var bytes: [UInt8] = []

    init(code: UInt32, authorizingHandle handle: UInt32? = nil) {
        bytes.appendBigEndian(handle == nil ? TPMConstant.tagNoSessions : TPMConstant.tagSessions)
        bytes.appendBigEndian(UInt32(0)) // size, patched in `build`
        bytes.appendBigEndian(code)
        if let handle {
            bytes.appendBigEndian(handle)
            // Authorization area with one TPMS_AUTH_COMMAND for the empty password:
            // sessionHandle TPM_RS_PW, nonce TPM2B size 0, attributes 0, hmac TPM2B size 0.
            bytes.appendBigEndian(UInt32(9))
            bytes.appendBigEndian(TPMConstant.passwordSession)
            bytes.appendBigEndian(UInt16(0))
            bytes.append(0)
            bytes.appendBigEndian(UInt16(0))
        }
    }

    func appending(_ value: UInt16) -> TPMCommandBuilder {
        var copy = self
        copy.bytes.appendBigEndian(value)
        return copy
    }

    func appending(_ value: UInt32) -> TPMCommandBuilder {
        var copy = self
        copy.bytes.appendBigEndian(value)
        return copy
    }

    func build() -> [UInt8] {
        var result = bytes
        result.replaceSubrange(2..<6, with: BigEndian.bytes(UInt32(result.count)))
        return result
    }
}

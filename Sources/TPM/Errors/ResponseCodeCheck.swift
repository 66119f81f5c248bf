internal import CTSS2
import SystemCalls

/// `Tss2_RC_Decode` formats into a buffer of its own; decode under one lock so concurrent
/// connections never read each other's text. It guards no value of its own (a byte, not `()`:
/// see ``Locked``).
private let decodeLock = Locked<UInt8>(0)

/// The one place a `TSS2_RC` becomes a Swift error.
///
/// - Throws: ``TPMError`` classified by ``TPMError/Code`` unless `rc` is success.
func check(_ rc: TSS2_RC, _ operation: @autoclosure () -> String) throws(TPMError) {
    guard rc != TSS2_RC_SUCCESS else { return }
    throw TPMError(responseCode: rc, operation: operation())
}

extension TPMError {
    init(responseCode rc: TSS2_RC, operation: String) {
        let decoded = decodeLock.withLock { _ in
            Tss2_RC_Decode(rc).map { String(cString: $0) } ?? ""
        }
        let layer = Layer(responseCode: rc)
        let code = Self.classify(rc, layer: layer)
        self.init(
            code, Self.message(for: code, operation: operation), operation: operation,
            layer: layer, responseCode: rc, decodedResponse: decoded)
    }

    /// TPM 2.0 Part 2 §6.6: format-one codes carry a parameter/handle/session number in bits 8-11
    /// that must be stripped before comparing; format-zero codes compare as they are.
    static func tpmBaseCode(_ rc: UInt32) -> UInt32 {
        let code = rc & 0xFFF
        if code & ResponseCodes.format1 != 0 {
            return ResponseCodes.format1 | (code & 0x3F)
        }
        return code
    }

    private static func classify(_ rc: TSS2_RC, layer: Layer) -> Code {
        switch layer {
        case .tpm, .resourceManagerTPM:
            switch tpmBaseCode(rc) {
            case ResponseCodes.authFail, ResponseCodes.badAuth: return .authorizationFailed
            case ResponseCodes.policyFail, ResponseCodes.policy, ResponseCodes.pcrChanged, ResponseCodes.pcr:
                return .policyCheckFailed
            case ResponseCodes.lockout: return .lockout
            case ResponseCodes.objectMemory, ResponseCodes.sessionMemory, ResponseCodes.memory,
                ResponseCodes.sessionHandles, ResponseCodes.objectHandles:
                return .outOfResources
            case ResponseCodes.nvSpace: return .nvSpaceExhausted
            case ResponseCodes.nvDefined: return .nvIndexAlreadyDefined
            case ResponseCodes.nvUninitialized: return .nvIndexUninitialized
            case ResponseCodes.handle: return .handleNotFound
            case ResponseCodes.size, ResponseCodes.value: return .invalidArgument
            default: return .other
            }
        case .tcti:
            return .tpmUnavailable
        case .esapi, .sapi, .marshalling:
            let base = rc & 0xFFFF
            if base == UInt32(TSS2_BASE_RC_IO_ERROR) || base == UInt32(TSS2_BASE_RC_NO_CONNECTION)
                || base == UInt32(TSS2_BASE_RC_NOT_PERMITTED)
            {
                return .tpmUnavailable
            }
            if base == UInt32(TSS2_BASE_RC_BAD_VALUE) || base == UInt32(TSS2_BASE_RC_BAD_SIZE)
                || base == UInt32(TSS2_BASE_RC_INSUFFICIENT_BUFFER)
            {
                return layer == .marshalling ? .malformedData : .invalidArgument
            }
            return .other
        default:
            return .other
        }
    }

    private static func message(for code: Code, operation: String) -> String {
        switch code {
        case .tpmUnavailable: "The TPM could not be reached"
        case .policyCheckFailed: "The TPM refused access because a policy condition no longer holds"
        case .authorizationFailed: "The TPM rejected the authorization value (wrong PIN)"
        case .ownerAuthorizationFailed:
            "The TPM's owner hierarchy has a password: give it in TPM_KEYCHAIN_OWNER_AUTH, or in a file TPM_KEYCHAIN_OWNER_AUTH_FILE names (it was missing or wrong)"
        case .lockout:
            "The TPM is in dictionary-attack lockout; wait for it to recover or reset it with the lockout authorization"
        case .outOfResources: "The TPM is out of object or session memory; another program may be holding handles"
        case .nvSpaceExhausted: "The TPM has no room for another NV index (TPM_RC_NV_SPACE)"
        case .nvIndexAlreadyDefined: "The NV index is already defined"
        case .nvIndexUninitialized: "The NV index has never been written"
        case .handleNotFound: "The TPM has no object or NV index at that handle"
        case .malformedData: "TPM data could not be decoded"
        case .invalidArgument: "The TPM rejected a parameter as out of range"
        default: "The TPM command failed"
        }
    }
}

/// TPM 2.0 Part 2 §6.6 response codes this layer tells apart. The C header spells these as
/// compound macros (RC_FMT1 + n) that do not import into Swift.
enum ResponseCodes {
    static let format1: UInt32 = 0x080
    static let version1: UInt32 = 0x100
    static let warning: UInt32 = 0x900

    static let value = format1 + 0x004
    static let handle = format1 + 0x00B
    static let authFail = format1 + 0x00E
    static let size = format1 + 0x015
    static let policyFail = format1 + 0x01D
    static let badAuth = format1 + 0x022

    static let initialize = version1 + 0x000
    static let policy = version1 + 0x026
    static let pcr = version1 + 0x027
    static let pcrChanged = version1 + 0x028
    static let nvUninitialized = version1 + 0x04A
    static let nvSpace = version1 + 0x04B
    static let nvDefined = version1 + 0x04C

    static let objectMemory = warning + 0x002
    static let sessionMemory = warning + 0x003
    static let memory = warning + 0x004
    static let sessionHandles = warning + 0x005
    static let objectHandles = warning + 0x006
    /// The TPM has no room for another object or session.
    static let outOfHandleSpace: Set<UInt32> = [objectMemory, sessionMemory, memory, sessionHandles, objectHandles]
    static let lockout = warning + 0x021
    static let retry = warning + 0x022
}

/// A failure of the TPM, of the TPM software stack, or of this layer's own checks.
///
/// Callers branch on ``code``; ``layer``, ``responseCode`` and ``decodedResponse`` say exactly
/// what the stack reported, for logs and bug reports. Messages never contain secrets.
public struct TPMError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What went wrong, in the terms a caller acts on.
    public enum Code: Sendable, Hashable {
        /// No TPM answered through the configured TCTI (no device, permission denied, swtpm not running).
        case tpmUnavailable
        /// A policy assertion did not hold: a PCR changed, an NV counter moved, the policy does not match.
        case policyCheckFailed
        /// The authorization value (PIN) was wrong.
        case authorizationFailed
        /// The owner hierarchy has a password, and it was not given or is wrong
        /// (``TPMConfiguration/ownerAuthorization``, `TPM_KEYCHAIN_OWNER_AUTH`).
        case ownerAuthorizationFailed
        /// The TPM's dictionary-attack protection is refusing authorizations until it recovers.
        case lockout
        /// The TPM ran out of object or session slots or memory.
        case outOfResources
        /// The TPM has no room for another NV index (TPM_RC_NV_SPACE): what other programs
        /// defined may fill it (systemd 259's NvPCRs do on some chips).
        case nvSpaceExhausted
        /// The storage key found on this TPM is not the one the data was sealed to (another TPM, or a cleared owner hierarchy).
        case wrongStorageKey
        /// An NV index already exists at the handle that was to be defined.
        case nvIndexAlreadyDefined
        /// The NV index exists but has never been written.
        case nvIndexUninitialized
        /// The handle names no object or NV index on this TPM.
        case handleNotFound
        /// Bytes that should hold a sealed object or TPM structure could not be decoded.
        case malformedData
        /// An argument was outside what the TPM or this layer accepts.
        case invalidArgument
        /// Another process kept the TPM busy past the wait limit.
        case busy
        /// The TPM did not answer a command within ``TPMConfiguration/timeout`` (a hung or stopped
        /// TPM); the connection was closed.
        case timedOut
        /// The connection was already closed.
        case connectionClosed
        /// Anything else; see ``TPMError/responseCode`` and ``TPMError/decodedResponse``.
        case other
    }

    /// The part of the stack that produced a response code.
    public enum Layer: Sendable, Hashable, CustomStringConvertible {
        case tpm, feature, esapi, sapi, marshalling, tcti, resourceManager, resourceManagerTPM
        /// This Swift layer's own checks (no TSS2 response code).
        case library
        case unknown(UInt8)

        init(responseCode: UInt32) {
            switch UInt8(truncatingIfNeeded: responseCode >> 16) {
            case 0: self = .tpm
            case 6: self = .feature
            case 7: self = .esapi
            case 8: self = .sapi
            case 9: self = .marshalling
            case 10: self = .tcti
            case 11: self = .resourceManager
            case 12: self = .resourceManagerTPM
            case let other: self = .unknown(other)
            }
        }

        public var description: String {
            switch self {
            case .tpm: "TPM"
            case .feature: "FAPI"
            case .esapi: "ESAPI"
            case .sapi: "SAPI"
            case .marshalling: "marshalling"
            case .tcti: "TCTI"
            case .resourceManager: "resource manager"
            case .resourceManagerTPM: "resource manager (TPM)"
            case .library: "TPMKeychain"
            case .unknown(let value): "layer \(value)"
            }
        }
    }

    public let code: Code
    public let layer: Layer
    /// The raw `TSS2_RC`, or 0 when the error comes from this layer's own checks.
    public let responseCode: UInt32
    /// `Tss2_RC_Decode`'s text for ``responseCode``; empty for library errors.
    public let decodedResponse: String
    /// What was being done, e.g. "Esys_Unseal" or "connecting to swtpm:host=127.0.0.1,port=2321".
    public let operation: String
    /// A sentence a person can act on.
    public let message: String

    public init(
        _ code: Code, _ message: String, operation: String = "", layer: Layer = .library,
        responseCode: UInt32 = 0, decodedResponse: String = ""
    ) {
        self.code = code
        self.message = message
        self.operation = operation
        self.layer = layer
        self.responseCode = responseCode
        self.decodedResponse = decodedResponse
    }

    public var description: String {
        var text = message
        if responseCode != 0 {
            let hex = String(responseCode, radix: 16)
            text += " [\(operation): \(layer) 0x\(hex) \(decodedResponse)]"
        } else if !operation.isEmpty {
            text += " [\(operation)]"
        }
        return text
    }
}

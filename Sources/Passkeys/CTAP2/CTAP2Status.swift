/// A CTAP2 status byte (CTAP 2.1 §8.2) with what went wrong, for the log: what an authenticator
/// answers instead of a response. The codes are the specification's; the reason never reaches
/// the client, which sees the byte only.
package struct CTAP2Status: Error, Equatable, Sendable, CustomStringConvertible {
    package let code: UInt8
    package let reason: String

    package init(_ code: UInt8, _ reason: String) {
        self.code = code
        self.reason = reason
    }

    package var description: String { "CTAP2 status 0x" + String(code, radix: 16) + ": " + reason }

    package static func invalidCommand(_ reason: String) -> Self { Self(0x01, reason) }
    package static func invalidParameter(_ reason: String) -> Self { Self(0x02, reason) }
    package static func invalidLength(_ reason: String) -> Self { Self(0x03, reason) }
    package static func invalidCBOR(_ reason: String) -> Self { Self(0x12, reason) }
    package static func missingParameter(_ reason: String) -> Self { Self(0x14, reason) }
    package static func limitExceeded(_ reason: String) -> Self { Self(0x15, reason) }
    package static func credentialExcluded(_ reason: String) -> Self { Self(0x19, reason) }
    package static func unsupportedAlgorithm(_ reason: String) -> Self { Self(0x26, reason) }
    package static func operationDenied(_ reason: String) -> Self { Self(0x27, reason) }
    package static func keyStoreFull(_ reason: String) -> Self { Self(0x28, reason) }
    package static func unsupportedOption(_ reason: String) -> Self { Self(0x2B, reason) }
    package static func invalidOption(_ reason: String) -> Self { Self(0x2C, reason) }
    package static func noCredentials(_ reason: String) -> Self { Self(0x2E, reason) }
    package static func notAllowed(_ reason: String) -> Self { Self(0x30, reason) }
    package static func pinInvalid(_ reason: String) -> Self { Self(0x31, reason) }
    package static func pinBlocked(_ reason: String) -> Self { Self(0x32, reason) }
    package static func pinAuthInvalid(_ reason: String) -> Self { Self(0x33, reason) }
    package static func pinAuthBlocked(_ reason: String) -> Self { Self(0x34, reason) }
    package static func pinNotSet(_ reason: String) -> Self { Self(0x35, reason) }
    package static func pinRequired(_ reason: String) -> Self { Self(0x36, reason) }
    package static func pinPolicyViolation(_ reason: String) -> Self { Self(0x37, reason) }
    package static func requestTooLarge(_ reason: String) -> Self { Self(0x39, reason) }
    package static func userActionTimeout(_ reason: String) -> Self { Self(0x2F, reason) }
    package static func invalidSubcommand(_ reason: String) -> Self { Self(0x3E, reason) }
    package static func unauthorizedPermission(_ reason: String) -> Self { Self(0x40, reason) }
    package static func other(_ reason: String) -> Self { Self(0x7F, reason) }
}

import CommandLineSupport
import FoundationEssentials
import TPMKeychain
import TPMKeychainFprintd
import ToolSupport

/// The authentication context of one command: the passcode from ``PasscodeInput``, and the
/// fingerprint reader through fprintd unless `TPM_KEYCHAIN_AUTHENTICATOR=none`.
enum CommandAuthentication {
    static let authenticatorVariable = "TPM_KEYCHAIN_AUTHENTICATOR"

    static var authenticator: (any Authenticator)? {
        ProcessInfo.processInfo.environment[authenticatorVariable] == "none" ? nil : FprintdAuthenticator()
    }

    static func context(for session: StoreSession, passcode: PasscodeInput?) -> AuthenticationContext {
        let source = passcode.map { input in
            PasscodeSource.secret { reason in try? input.read(prompt: "device passcode to \(reason): ") }
        }
        let context = AuthenticationContext(
            authenticator: authenticator, passcode: source, applicationIdentifier: "tpm-keychain",
            location: session.location)
        context.localizedReason = "read a keychain item"
        return context
    }
}

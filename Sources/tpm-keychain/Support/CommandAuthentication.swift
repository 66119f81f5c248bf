import Foundation
import TPMKeychain

/// The authentication context of one command: the passcode from ``PasscodeInput``, and no
/// biometric authenticator unless one is configured.
enum CommandAuthentication {
    static func context(for session: StoreSession, passcode: PasscodeInput?) -> AuthenticationContext {
        let source = passcode.map { input in
            PasscodeSource.secret { reason in try? input.read(prompt: "device passcode to \(reason): ") }
        }
        let context = AuthenticationContext(authenticator: nil, passcode: source, applicationIdentifier: "tpm-keychain",
                                            location: session.location)
        context.localizedReason = "read a keychain item"
        return context
    }
}

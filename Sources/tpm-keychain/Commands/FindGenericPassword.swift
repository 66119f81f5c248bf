import ArgumentParser
import Foundation
import TPMKeychain
import ToolSupport

/// `security find-generic-password`: the item's attributes, or with -w only its password.
struct FindGenericPassword: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "find-generic-password",
        abstract: "Show a generic password item's attributes, or with -w only its password.")

    @OptionGroup var store: KeychainOptions

    @Option(name: [.customShort("s"), .customLong("service")], help: "Service name.")
    var service: String

    @Option(name: [.customShort("a"), .customLong("account")],
            help: "Account name; omitted: the service's first account in creation order, as security matches any.")
    var account: String?

    @Flag(name: [.customShort("w"), .customLong("password")], help: "Print only the password (to standard output).")
    var passwordOnly = false

    @OptionGroup var passcodeOptions: PasscodeOptions

    func run() throws {
        try reportingErrors {
            let path = store.path
            // Looking something up never creates a store (or starts a simulator for one).
            try KeychainLocation(path: path).checkStore()
            try StoreSession.with(path) { try perform(in: $0) }
        }
    }

    func perform(in session: StoreSession, context: AuthenticationContext? = nil, output: OutputLine = { print($0) }) throws {
        let keychain = try Keychain(service: service, location: session.location)
        guard let account = try account ?? keychain.allKeys().first else {
            throw KeychainError(.itemNotFound, "No item of service \"\(service)\"")
        }
        if passwordOnly {
            // A protected item asks for biometry or the passcode (a reused context asks once).
            let context = context ?? CommandAuthentication.context(for: session, passcode: PasscodeInput(passcodeOptions))
            guard let secret = try waitFor({ try await keychain.get(account, as: Data.self, context: context) }) else { throw notFound(account) }
            output(SecurityFormat.bareValue(secret))
        } else {
            guard let attributes = try keychain.attributes(forKey: account) else { throw notFound(account) }
            SecurityFormat.attributeBlock(attributes, keychain: session.path).forEach(output)
        }
    }

    private func notFound(_ account: String) -> KeychainError {
        KeychainError(.itemNotFound, "No item for account \"\(account)\" of service \"\(service)\"")
    }
}

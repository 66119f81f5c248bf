import ArgumentParser
import CommandLineSupport
import FoundationEssentials
import TPMKeychain
import ToolSupport

/// `security delete-generic-password`.
struct DeleteGenericPassword: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "delete-generic-password", abstract: "Delete a generic password item.")

    @OptionGroup var store: KeychainOptions

    @Option(name: [.customShort("s"), .customLong("service")], help: "Service name.")
    var service: String

    @Option(name: [.customShort("a"), .customLong("account")], help: "Account name.")
    var account: String

    func run() throws {
        try reportingErrors {
            let path = store.path
            try StoreSession.withExisting(path) { try perform(in: $0) }
        }
    }

    func perform(in session: StoreSession, output: OutputLine = { print($0) }) throws {
        let keychain = try Keychain(service: service, location: session.location).acting(for: .cli)
        guard try keychain.remove(account) else {
            throw KeychainError(.itemNotFound, "No item for account \"\(account)\" of service \"\(service)\"")
        }
        output("password has been deleted.")
    }
}

import ArgumentParser
import CommandLineSupport
import FoundationEssentials
import KeychainVocabulary
import TPMKeychain
import ToolSupport

/// `security find-generic-password`: the item's attributes, or with -w only its password.
struct FindGenericPassword: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "find-generic-password",
        abstract: "Show a generic password item's attributes, or with -w only its password.",
        discussion: """
            The first item of the service (in creation order) that matches every attribute given is \
            shown. Items of an access group are another program's and are not searched. With --json \
            the item is one JSON object (README, "Scriptable output"), holding the password only \
            with -w or -g.
            """)

    @OptionGroup var store: KeychainOptions

    @Option(name: [.customShort("s"), .customLong("service")], help: "Service name.")
    var service: String

    @Option(
        name: [.customShort("a"), .customLong("account")],
        help: "Account name; omitted: the service's first account in creation order, as security matches any.")
    var account: String?

    @Option(
        name: [.customShort("D"), .customLong("kind")], parsing: .unconditional,
        help: "Match the kind (kSecAttrDescription).")
    var kind: String?

    @Option(
        name: [.customShort("G"), .customLong("generic")], parsing: .unconditional,
        help: "Match the generic attribute (kSecAttrGeneric), as the UTF-8 bytes of the text given.")
    var generic: String?

    @OptionGroup var shown: FoundItemOutput

    @OptionGroup var passcodeOptions: PasscodeOptions

    func run() throws {
        try reportingErrors {
            let path = store.path
            try StoreSession.withExisting(path) { try perform(in: $0) }
        }
    }

    func perform(
        in session: StoreSession, context: AuthenticationContext? = nil, output: OutputLine = { print($0) },
        errorOutput: OutputLine = { printError($0) }
    ) throws {
        // The common scripted lookup (-s, -a, -w and nothing else): one read by name, without the
        // query that scans the service's items for the attribute block.
        if shown.passwordOnly, !shown.showPassword, !shown.json, kind == nil, generic == nil, let account {
            let keychain = try Keychain(service: service, location: session.location).acting(for: .cli)
            // A plain item needs no context; a protected one reports interactionNotAllowed, and is
            // then read through one that may ask.
            var found: Data?
            switch Result<Data?, KeychainError>(catching: { () throws(KeychainError) in
                try keychain.data(forKey: account)
            }) {
            case .success(let value):
                found = value
            case .failure(let error) where error.code == .interactionNotAllowed:
                let context =
                    context ?? CommandAuthentication.context(for: session, passcode: PasscodeInput(passcodeOptions))
                found = try waitFor { try await keychain.get(account, as: Data.self, context: context) }
            case .failure(let error):
                throw error
            }
            guard let secret = found else { throw notFound() }
            output(SecurityFormat.bareValue(secret))
            return
        }
        var matching = AttributeList()
        matching.setString(service, for: AttributeTag.service)
        matching.setString(account, for: AttributeTag.account)
        matching.setString(kind, for: AttributeTag.description)
        matching[AttributeTag.generic] = generic.map { Array($0.utf8) }
        let found = try ItemService(location: session.location, caller: AccessCaller(face: .cli)).query(
            .genericPassword, matching: matching)
        guard let item = found.map(ShownItem.init).first(where: \.isUngrouped),
            let account = item.text(AttributeTag.account)
        else {
            throw notFound()
        }
        var secret: Data?
        if shown.showsSecret {
            // Through the Keychain API: a protected item asks for biometry or the passcode (a
            // reused context asks once).
            let keychain = try Keychain(service: service, location: session.location).acting(for: .cli)
            let context =
                context ?? CommandAuthentication.context(for: session, passcode: PasscodeInput(passcodeOptions))
            guard let value = try waitFor({ try await keychain.get(account, as: Data.self, context: context) }) else {
                throw notFound()
            }
            secret = value
        }
        try shown.show(item, keychain: session.path, secret: secret, output: output, errorOutput: errorOutput)
    }

    private func notFound() -> KeychainError {
        KeychainError(
            .itemNotFound,
            "No item for \(account.map { "account \"\($0)\"" } ?? "any account") of service \"\(service)\"")
    }
}

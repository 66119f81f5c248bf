import ArgumentParser
import CommandLineSupport
import FoundationEssentials
import KeychainVocabulary
import TPMKeychain
import ToolSupport

/// `security add-generic-password`, for a TPM-sealed store.
struct AddGenericPassword: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "add-generic-password",
        abstract: "Add a generic password item (or update it with -U).",
        discussion: """
            Without -w the password is read from standard input, which keeps it out of the process \
            list and shell history: on a terminal you are prompted with echo off; otherwise all of \
            standard input is used, minus one trailing newline.
            """)

    @OptionGroup var store: KeychainOptions

    @Option(name: [.customShort("s"), .customLong("service")], help: "Service name.")
    var service: String

    @Option(name: [.customShort("a"), .customLong("account")], help: "Account name.")
    var account: String

    @OptionGroup var item: NewItemOptions

    @Option(
        name: [.customShort("D"), .customLong("kind")], parsing: .unconditional,
        help: "Kind, as security calls kSecAttrDescription (\"application password\", ...).")
    var kind: String?

    @Option(
        name: [.customShort("G"), .customLong("generic")], parsing: .unconditional,
        help: "Generic attribute (kSecAttrGeneric), stored as the UTF-8 bytes of the text given.")
    var generic: String?

    @OptionGroup var protection: ProtectionOptions

    func run() throws {
        try reportingErrors {
            // Validate and read the password before a TPM (or a simulator) is started for nothing.
            _ = try Keychain(service: service)
            try ItemIdentity.validate(account, "account")
            if try protection.accessControl() != nil,
                kind != nil || generic != nil
            {
                // The protected write takes no such attributes; storing the item without them would drop them silently.
                throw CommandFailure(
                    ExitStatus.usage, "-D and -G cannot be combined with --access-control or --accessible")
            }
            let value = try PasswordInput.forNewItem(given: item.password, allowEmpty: item.allowEmpty)
            try StoreSession.with(store.path) { try perform(in: $0, value: value) }
        }
    }

    /// Adds (or with -U upserts) the item; prints nothing on success, like `security`.
    func perform(in session: StoreSession, value: PasswordValue, context: AuthenticationContext? = nil) throws {
        let keychain = try Keychain(service: service, location: session.location).acting(for: .cli)
        if let control = try protection.accessControl() {
            // Adding never prompts; biometryCurrentSet binds to the authenticator's enrollment.
            if !item.update, try keychain.contains(account) {
                throw KeychainError(.duplicateItem, "An item for \(account) already exists")
            }
            let context = context ?? CommandAuthentication.context(for: session, passcode: nil)
            let (account, label) = (account, item.label)
            switch value {
            case .text(let text):
                try waitFor {
                    try await keychain.set(
                        text, forKey: account, accessControl: control, context: context, label: label)
                }
            case .bytes(let bytes):
                try waitFor {
                    try await keychain.set(
                        bytes, forKey: account, accessControl: control, context: context, label: label)
                }
            }
            return
        }
        // On the engine, as the Keychain API writes (same primary key, same value kinds), which
        // also sets kSecAttrDescription; -U keeps the attributes this command does not give.
        var primary = AttributeList()
        primary.setString(service, for: AttributeTag.service)
        primary.setString(account, for: AttributeTag.account)
        if let kind { primary.setString(kind, for: AttributeTag.description) }
        try ItemService(location: session.location, caller: AccessCaller(face: .cli)).write(
            .genericPassword, primary: primary, mode: item.update ? .upsert : .add, value: value.itemValue,
            changes: AttributeChanges(
                label: item.label, comment: item.comment, genericData: generic.map { Data($0.utf8) }))
    }
}

import ArgumentParser
import CommandLineSupport
import FoundationEssentials
import KeychainVocabulary
import TPMKeychain
import ToolSupport

/// `security add-internet-password`, for a TPM-sealed store: an internet-password item
/// (kSecClassInternetPassword) without an access group, stored as SecItem stores one.
struct AddInternetPassword: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "add-internet-password",
        abstract: "Add an internet password item (or update it with -U).",
        discussion: """
            -a and -s are required. The item is named by server, protocol, port, path, account, \
            authentication type and security domain (Apple's primary key): a second add of the same \
            is a duplicate (exit 45) unless -U updates it. The authentication type is "dflt" unless \
            -t gives another. Without -w the password is read from standard input, as \
            add-generic-password reads it.
            """)

    @OptionGroup var store: KeychainOptions

    @OptionGroup var attributes: InternetPasswordOptions

    @OptionGroup var item: NewItemOptions

    @Option(
        name: [.customShort("D"), .customLong("kind")], parsing: .unconditional,
        help: "Kind, as security calls kSecAttrDescription (\"Internet password\", ...).")
    var kind: String?

    func validate() throws {
        guard attributes.server != nil else { throw ValidationError("Missing expected argument '-s <server>'") }
        guard attributes.account != nil else { throw ValidationError("Missing expected argument '-a <account>'") }
    }

    func run() throws {
        try reportingErrors {
            // Validate and read the password before a TPM (or a simulator) is started for nothing.
            let primary = try primaryAttributes()
            let value = try PasswordInput.forNewItem(given: item.password, allowEmpty: item.allowEmpty)
            try StoreSession.with(store.path) { try perform(in: $0, primary: primary, value: value) }
        }
    }

    /// The item's primary key, its kind and its defaults.
    ///
    /// - Throws: ``KeychainError`` `.invalidParameter` for an empty or oversized server or
    ///   account; ``CommandFailure`` for a malformed four-character code.
    func primaryAttributes() throws -> AttributeList {
        try ItemIdentity.validate(attributes.server ?? "", "server")
        try ItemIdentity.validate(attributes.account ?? "", "account")
        var primary = try attributes.attributes(defaults: true)
        primary.setString(kind, for: AttributeTag.description)
        return primary
    }

    /// Adds (or with -U upserts) the item; prints nothing on success, like `security`.
    func perform(in session: StoreSession, primary: AttributeList, value: PasswordValue) throws {
        try ItemService(location: session.location, caller: AccessCaller(face: .cli)).write(
            .internetPassword, primary: primary, mode: item.update ? .upsert : .add, value: value.itemValue,
            changes: AttributeChanges(label: item.label, comment: item.comment))
    }
}

/// `security find-internet-password`: the first matching item's attributes, or with -w only its password.
struct FindInternetPassword: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "find-internet-password",
        abstract: "Show an internet password item's attributes, or with -w only its password.",
        discussion: """
            Every attribute given must match; those not given match anything. Of several matches the \
            first in creation order is shown. Items of an access group (such as \
            git-credential-tpm-keychain's) are another program's and are not searched. With --json \
            the item is one JSON object (README, "Scriptable output"), holding the password only \
            with -w or -g.
            """)

    @OptionGroup var store: KeychainOptions

    @OptionGroup var attributes: InternetPasswordOptions

    @OptionGroup var shown: FoundItemOutput

    func run() throws {
        try reportingErrors {
            let matching = try attributes.attributes(defaults: false)
            let path = store.path
            try StoreSession.withExisting(path) { try perform(in: $0, matching: matching) }
        }
    }

    func perform(
        in session: StoreSession, matching: AttributeList, output: OutputLine = { print($0) },
        errorOutput: OutputLine = { printError($0) }
    ) throws {
        let items = try ItemService(location: session.location, caller: AccessCaller(face: .cli))
        guard let found = try InternetPasswordMatch.first(matching, in: items) else {
            throw InternetPasswordMatch.notFound(matching)
        }
        let item = ShownItem(found)
        var secret: Data?
        if shown.showsSecret {
            guard let bytes = try items.secret(of: found, key: nil) else {
                throw InternetPasswordMatch.notFound(matching)
            }
            secret = Data(bytes)
        }
        try shown.show(item, keychain: session.path, secret: secret, output: output, errorOutput: errorOutput)
    }
}

/// `security delete-internet-password`: deletes the first matching item, as `security` does.
struct DeleteInternetPassword: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "delete-internet-password",
        abstract: "Delete an internet password item: the first that matches.",
        discussion: """
            Every attribute given must match, and at least one must be given; of several matches \
            the first in creation order is deleted. Its attributes are printed, as security prints \
            them, then "password has been deleted.".
            """)

    @OptionGroup var store: KeychainOptions

    @OptionGroup var attributes: InternetPasswordOptions

    func validate() throws {
        // security would delete the keychain's first internet password; a script's empty variable
        // must not do that.
        guard attributes.namesAnything else {
            throw ValidationError("Name the item to delete with at least one of -a, -s, -r, -P, -p, -t, -d")
        }
    }

    func run() throws {
        try reportingErrors {
            let matching = try attributes.attributes(defaults: false)
            let path = store.path
            try StoreSession.withExisting(path) { try perform(in: $0, matching: matching) }
        }
    }

    func perform(in session: StoreSession, matching: AttributeList, output: OutputLine = { print($0) }) throws {
        let items = try ItemService(location: session.location, caller: AccessCaller(face: .cli))
        guard let found = try InternetPasswordMatch.first(matching, in: items),
            try items.delete(.internetPassword, primary: found.attributes)
        else {
            throw InternetPasswordMatch.notFound(matching)
        }
        SecurityFormat.attributeBlock(ShownItem(found), keychain: session.path).forEach(output)
        output("password has been deleted.")
    }
}

/// How `find-` and `delete-internet-password` choose their item.
enum InternetPasswordMatch {
    /// The first item in creation order, without an access group, with every attribute of `matching`.
    static func first(_ matching: AttributeList, in items: ItemService) throws(KeychainError) -> ItemQueryResult? {
        try items.query(.internetPassword, matching: matching).first { ShownItem($0).isUngrouped }
    }

    static func notFound(_ matching: AttributeList) -> KeychainError {
        let server = matching.string(AttributeTag.server).map { "server \"\($0)\"" } ?? "any server"
        let account = matching.string(AttributeTag.account).map { "account \"\($0)\" of " } ?? ""
        return KeychainError(.itemNotFound, "No internet password for \(account)\(server) matches")
    }
}

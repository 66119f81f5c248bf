import ArgumentParser
import CommandLineSupport
import FoundationEssentials
import KeychainVocabulary
import TPMKeychain
import ToolSupport

/// `security dump-keychain`: every password item of the store, all services and servers.
struct DumpKeychain: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dump-keychain",
        abstract: "List every item of the store: attributes, and with -d their secrets.",
        discussion: """
            Generic passwords first, then internet passwords, each in creation order; items of every \
            access group. With --json the listing is one JSON array of the objects find-*-password \
            --json prints (README, "Scriptable output"), holding passwords only with -d.
            """)

    @OptionGroup var store: KeychainOptions

    @Flag(name: [.customShort("d"), .customLong("decrypt")], help: "Also print each item's secret.")
    var decrypt = false

    @Flag(name: .customLong("json"), help: "Print the items as a JSON array.")
    var json = false

    func run() throws {
        try reportingErrors {
            let path = store.path
            // Never creates a store: a mistyped path is an error, not an empty keychain.
            try StoreSession.withExisting(path) { try perform(in: $0) }
        }
    }

    func perform(in session: StoreSession, output: OutputLine = { print($0) }) throws {
        let items = try ItemService(location: session.location, caller: AccessCaller(face: .cli))
        var objects: [JSONValue] = []
        for itemClass in [ItemClass.genericPassword, .internetPassword] {
            for found in try items.query(itemClass, matching: AttributeList()) {
                let item = ShownItem(found)
                let secret = decrypt ? try secret(of: found, item, items, session) : nil
                if json {
                    objects.append(.object(ItemJSON.object(item, keychain: session.path, secret: secret)))
                    continue
                }
                SecurityFormat.attributeBlock(item, keychain: session.path).forEach(output)
                guard decrypt else { continue }
                // Deleted by another process since the listing: say so rather than fail the dump.
                output("data:")
                output(secret.map(SecurityFormat.value) ?? "<NULL>")
            }
        }
        if json { output(ItemJSON.text(.array(objects))) }
    }

    /// A secret for -d; nil when the item went away meanwhile. A protected generic password is
    /// read through the Keychain API, which opens items that need only an unlocked device; one
    /// that needs a person fails the dump, as it did.
    private func secret(
        of found: ItemQueryResult, _ item: ShownItem, _ items: ItemService, _ session: StoreSession
    ) throws -> Data? {
        if found.isProtected, found.itemClass == .genericPassword, let service = item.text(AttributeTag.service),
            let account = item.text(AttributeTag.account)
        {
            let group = item.isUngrouped ? nil : item.text(AttributeTag.accessGroup)
            return try Keychain(service: service, accessGroup: group, location: session.location).acting(for: .cli)
                .data(forKey: account)
        }
        return try items.secret(of: found, key: nil).map { Data($0) }
    }
}

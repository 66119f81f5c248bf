import ArgumentParser
import Foundation
import TPMKeychain
import ToolSupport

/// `security dump-keychain`: every item of the store, all services.
struct DumpKeychain: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dump-keychain",
        abstract: "List every item of the store: attributes, and with -d their secrets.")

    @OptionGroup var store: KeychainOptions

    @Flag(name: [.customShort("d"), .customLong("decrypt")], help: "Also print each item's secret.")
    var decrypt = false

    func run() throws {
        try reportingErrors {
            let path = store.path
            // Never creates a store: a mistyped path is an error, not an empty keychain.
            try KeychainLocation(path: path).checkStore()
            try StoreSession.with(path) { try perform(in: $0) }
        }
    }

    func perform(in session: StoreSession, output: OutputLine = { print($0) }) throws {
        for item in try Keychain.allItems(in: session.location) {
            SecurityFormat.attributeBlock(item, keychain: session.path).forEach(output)
            guard decrypt else { continue }
            let keychain = try Keychain(service: item.service, accessGroup: item.accessGroup,
                                        location: session.location)
            // Deleted by another process since the listing: say so rather than fail the dump.
            output("data:")
            output(try keychain.data(forKey: item.account).map(SecurityFormat.value) ?? "<NULL>")
        }
    }
}

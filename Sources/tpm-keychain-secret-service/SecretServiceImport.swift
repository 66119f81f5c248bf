import ArgumentParser
import FoundationEssentials
import SecretService
import TPMKeychain
import ToolSupport

#if canImport(Glibc)
import Glibc
#endif

/// `tpm-keychain secret-service import`: moving in from gnome-keyring, KWallet or KeePassXC.
struct SecretServiceImport: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract:
            "Copy every item of the Secret Service provider running now (gnome-keyring, KWallet, KeePassXC) into a store.",
        discussion: """
            Run it while the other provider still owns org.freedesktop.secrets, then start ours with \
            `tpm-keychain secret-service --replace`. The source's default collection goes into \
            --into; each other collection into a store named after its label (--merge: all into \
            --into). Nothing is removed from the source; a locked \
            collection is unlocked through the provider's own prompt. Items travel encrypted (a DH \
            session). Running it again rewrites the items it copied (same attributes) rather than \
            duplicating them.
            """)

    @Option(help: ArgumentHelp("The source's D-Bus address, instead of the session bus.", valueName: "address"))
    var address: String?

    @Option(help: ArgumentHelp("Only the source's collections with this label (repeatable).", valueName: "label"))
    var collection: [String] = []

    @Option(
        help: ArgumentHelp("The store (collection) that receives the source's default collection.", valueName: "name"))
    var into = "default"

    @Flag(help: "Put every collection's items into the --into store, instead of a store per source collection.")
    var merge = false

    @Option(
        name: .customLong("data-directory"),
        help: ArgumentHelp("Where our stores are (default: $XDG_DATA_HOME/tpm-keychain).", valueName: "dir"),
        completion: .directory)
    var dataDirectory: String?

    @Flag(
        name: .customLong("allow-simulated"),
        help:
            "Where no TPM is usable, create the receiving store on a simulated TPM kept in it (nothing bound to hardware; also TPM_KEYCHAIN_ALLOW_SIMULATED=1)."
    )
    var allowSimulated = false

    func run() throws {
        var options = ProviderImport.Options(
            address: address,
            dataDirectory: dataDirectory.map(StoreDirectory.absolute) ?? KeychainLocation.dataDirectory)
        options.collections = collection
        options.into = into
        options.mergeCollections = merge
        options.allowsSimulatedTPM = allowSimulated || StoreTPM.simulationAllowedByEnvironment
        let bar = ProgressBar(enabled: isatty(2) == 1)
        let report: ProviderImport.Report
        do {
            report = try ProviderImport.run(options) { done, total in bar.show(done, of: total) }
        } catch {
            bar.finish()
            printError("tpm-keychain: \(error)")
            throw ExitCode(ExitStatus.unavailable)
        }
        bar.finish()
        print(
            "Imported \(report.imported) items from \(report.collections) collections into \(report.stores.isEmpty ? options.into : report.stores.joined(separator: ", "))"
        )
        if !report.locked.isEmpty {
            printError("tpm-keychain: left locked, not imported: \(report.locked.joined(separator: ", "))")
        }
    }
}

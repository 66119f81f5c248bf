import ArgumentParser
import FoundationEssentials
import SecretService
import TPMKeychain
import ToolSupport

/// `tpm-keychain secret-service move-to-portal`: a sandboxed application's items, out of the
/// Secret Service into the keyring file its libsecret opens with the Secret portal's secret.
struct SecretServiceMoveToPortal: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "move-to-portal",
        abstract: "Move a Flatpak application's Secret Service items into its own portal keyring.",
        discussion: """
            For an application that reached the Secret Service through a hole in its sandbox and \
            now uses the Secret portal (`secret-service --portal`): the items whose attributes \
            include every --attribute are written, sealed with the secret the portal gives that \
            application, into its keyring file (~/.var/app/ID/data/keyrings/default.keyring, merged \
            with what it holds), read back, and then deleted from the Secret Service (--keep: \
            left there). Quit the application first: it is refused while it runs.
            """)

    @Option(name: .customLong("app-id"), help: ArgumentHelp("The Flatpak application ID.", valueName: "id"))
    var applicationID: String

    @Option(
        name: .customLong("attribute"),
        help: ArgumentHelp(
            "An attribute the application's items have, such as xdg:schema=org.example.App (repeatable; at least one).",
            valueName: "name=value"))
    var attributes: [String] = []

    @Option(
        name: .customLong("keyring-file"),
        help: ArgumentHelp("The keyring file, instead of the application's.", valueName: "path"),
        completion: .file())
    var keyringFile: String?

    @Flag(help: "Copy only: leave the items in the Secret Service.")
    var keep = false

    @Option(
        name: .customLong("data-directory"),
        help: ArgumentHelp("Where our stores are (default: $XDG_DATA_HOME/tpm-keychain).", valueName: "dir"),
        completion: .directory)
    var dataDirectory: String?

    func run() throws {
        var pairs: [String: String] = [:]
        for attribute in attributes {
            guard let equals = attribute.firstIndex(of: "="), equals != attribute.startIndex else {
                throw ValidationError("--attribute takes name=value, not \"\(attribute)\"")
            }
            pairs[String(attribute[..<equals])] = String(attribute[attribute.index(after: equals)...])
        }
        var options = PortalMove.Options(
            applicationID: applicationID, attributes: pairs,
            dataDirectory: dataDirectory.map(StoreDirectory.absolute) ?? KeychainLocation.dataDirectory)
        options.keyringFile = keyringFile
        options.keepsOriginals = keep
        let report: PortalMove.Report
        do {
            report = try PortalMove.run(options)
        } catch {
            printError("tpm-keychain: \(error)")
            throw ExitCode(ExitStatus.unavailable)
        }
        let verb = keep ? "Copied" : "Moved"
        print("\(verb) \(report.moved.count) items into \(report.keyringFile)")
        for label in report.moved { print("  \(label)") }
        if report.leftLocked > 0 { printError("tpm-keychain: \(report.leftLocked) items stayed locked and were left") }
        if report.notDeleted > 0 {
            printError("tpm-keychain: \(report.notDeleted) items asked for a prompt to be deleted and were left")
        }
    }
}

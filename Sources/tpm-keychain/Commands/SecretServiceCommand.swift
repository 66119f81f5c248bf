import ArgumentParser
import Dispatch
import SecretService
import SystemCalls
import TPMKeychain
import ToolSupport

/// `tpm-keychain secret-service`: the Secret Service daemon, so every program that keeps its
/// secrets through libsecret, python keyring or the D-Bus API keeps them in the TPM-bound stores.
struct SecretServiceCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "secret-service",
        abstract: "Serve the stores as the desktop's Secret Service (org.freedesktop.secrets on the session bus).",
        discussion: """
            Each store in the data directory is a collection; the alias "default" names the store \
            "default" (the Keychain API's and the CLI's), and a `session` collection lives in memory. \
            Runs until stopped (SIGTERM, SIGINT) or until another provider takes the name with --replace. \
            Exits 69 when another provider owns the name.
            """)

    @Option(help: ArgumentHelp("A D-Bus address to serve on instead of the session bus.", valueName: "address"))
    var address: String?

    @Flag(help: "Take org.freedesktop.secrets over from the provider that owns it (gnome-keyring, KWallet, another daemon).")
    var replace = false

    @Option(
        name: .customLong("data-directory"),
        help: ArgumentHelp("Where the collections' stores are (default: $XDG_DATA_HOME/tpm-keychain).", valueName: "dir"),
        completion: .directory)
    var dataDirectory: String?

    @Option(
        name: .customLong("audit-log"),
        help: ArgumentHelp(
            "Append a line per access (time, caller's uid, pid and executable, action, labels; never a secret).",
            valueName: "file"))
    var auditLog: String?

    func run() throws {
        var options = SecretServiceDaemon.Options(
            address: address, dataDirectory: dataDirectory.map(StoreDirectory.absolute) ?? KeychainLocation.dataDirectory)
        options.replace = replace
        options.auditLog = auditLog.map(StoreDirectory.absolute)
        try createDirectories(options.dataDirectory)
        let stopper = try SecretServiceDaemon.Stopper()
        let finished = DispatchSemaphore(value: 0)
        let token = ProcessGuard.onInterruption {
            stopper.stop()
            // The loop closes the stores (keys erased, simulated TPMs shut down) before the process ends.
            _ = finished.wait(timeout: .now() + 10)
        }
        defer { ProcessGuard.remove(token) }
        let ending: SecretServiceDaemon.Ending
        do {
            ending = try SecretServiceDaemon.run(
                options, stopper: stopper, warn: { printError("tpm-keychain: warning: \($0)") }
            ) {
                printError("tpm-keychain: serving \(SecretServiceDaemon.busName) from \(options.dataDirectory)")
            }
        } catch {
            finished.signal()
            printError("tpm-keychain: \(error)")
            throw ExitCode(ExitStatus.unavailable)
        }
        finished.signal()
        if ending == .replaced { printError("tpm-keychain: another provider took \(SecretServiceDaemon.busName)") }
    }
}

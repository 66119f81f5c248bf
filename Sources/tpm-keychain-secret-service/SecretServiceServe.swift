import ArgumentParser
import CommandLineSupport
import Dispatch
import FoundationEssentials
import PersonPrompts
import SecretService
import SystemCalls
import TPMKeychain
import TPMKeychainFprintd
import ToolSupport

/// `tpm-keychain secret-service [serve]`: the daemon.
struct SecretServiceServe: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Serve the stores as the desktop's Secret Service (org.freedesktop.secrets on the session bus).",
        discussion: """
            Each store in the data directory is a collection; the alias "default" names the store \
            "default" (the Keychain API's and the CLI's), and a `session` collection lives in memory. \
            Runs until stopped (SIGTERM, SIGINT) or until another provider takes the name with --replace. \
            Exits 69 when another provider owns the name.
            """)

    @Option(help: ArgumentHelp("A D-Bus address to serve on instead of the session bus.", valueName: "address"))
    var address: String?

    @Flag(
        help:
            "Take org.freedesktop.secrets over from the provider that owns it (gnome-keyring, KWallet, another daemon)."
    )
    var replace = false

    @Option(
        name: .customLong("data-directory"),
        help: ArgumentHelp(
            "Where the collections' stores are (default: $XDG_DATA_HOME/tpm-keychain).", valueName: "dir"),
        completion: .directory)
    var dataDirectory: String?

    @Option(
        name: .customLong("audit-log"),
        help: ArgumentHelp(
            "Append a line per access (time, caller's uid, pid and executable, action, labels; never a secret).",
            valueName: "file"))
    var auditLog: String?

    @OptionGroup var prompts: PersonPromptOptions

    @Option(
        name: .customLong("confirm-command"),
        help: ArgumentHelp(
            "A command that asks the person whether a program may read from a confirm-each-access collection (the question is in $TPM_KEYCHAIN_PROMPT_REASON; for example: zenity --question --text \"$TPM_KEYCHAIN_PROMPT_REASON\"). Exit status 0 allows one read; 0 with the line \"remember\" on standard output allows the program from now on (a grant: tpm-keychain grants), \"session\" for this login session.",
            valueName: "command"))
    var confirmCommand: String?

    @Flag(
        name: .customLong("lock-with-session"),
        help: "Lock every collection (and forget its opened keys) when the login session locks (logind).")
    var lockWithSession = false

    @Option(
        name: .customLong("logind-address"),
        help: ArgumentHelp("logind's bus, instead of the system bus.", visibility: .hidden))
    var logindAddress: String?

    @Option(
        name: .customLong("logind-session"), help: ArgumentHelp("The logind session ID to follow.", visibility: .hidden)
    )
    var logindSession: String?

    @Flag(
        name: .customLong("allow-simulated"),
        help:
            "Where no TPM is usable, create new collections on a simulated TPM kept in their store (nothing bound to hardware; reported as SIMULATED; also TPM_KEYCHAIN_ALLOW_SIMULATED=1)."
    )
    var allowSimulated = false

    @Flag(
        name: .long,
        help:
            "Also be the Secret portal's backend (org.freedesktop.impl.portal.Secret) for xdg-desktop-portal: each sandboxed application gets a secret derived in the TPM from its ID, while the keychain is unlocked."
    )
    var portal = false

    func run() throws {
        var options = SecretServiceDaemon.Options(
            address: address,
            dataDirectory: dataDirectory.map(StoreDirectory.absolute) ?? KeychainLocation.dataDirectory)
        options.replace = replace
        options.allowsSimulatedTPM = allowSimulated || StoreTPM.simulationAllowedByEnvironment
        options.servesPortal = portal
        options.auditLog = auditLog.map(StoreDirectory.absolute)
        if prompts.asksFprintd { options.authenticator = FprintdAuthenticator(busAddress: prompts.fprintdAddress) }
        options.passcode = prompts.passcodeCommand.map(PasscodeCommand.source)
        options.confirm = confirmCommand.map(PasscodeCommand.confirmation)
        if lockWithSession || logindAddress != nil {
            do {
                options.sessionLock = try LogindSessionLock(busAddress: logindAddress, session: logindSession)
            } catch {
                printError("tpm-keychain: --lock-with-session: \(error)")
                throw ExitCode(ExitStatus.unavailable)
            }
        }
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
            let dataDirectory = options.dataDirectory
            ending = try SecretServiceDaemon.run(
                options, stopper: stopper, warn: { printError("tpm-keychain: warning: \($0)") },
                ready: { printError("tpm-keychain: serving \(SecretServiceDaemon.busName) from \(dataDirectory)") })
        } catch {
            finished.signal()
            printError("tpm-keychain: \(error)")
            throw ExitCode(ExitStatus.unavailable)
        }
        finished.signal()
        if ending == .replaced { printError("tpm-keychain: another provider took \(SecretServiceDaemon.busName)") }
    }
}

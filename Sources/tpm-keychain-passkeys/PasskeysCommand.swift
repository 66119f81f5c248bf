import ArgumentParser
import CommandLineSupport
import Passkeys
import PersonPrompts
import SystemCalls
import TPMKeychain
import TPMKeychainFprintd
import ToolSupport

#if canImport(Glibc)
import Glibc
#endif

/// `tpm-keychain-passkeys`: a passkey authenticator (CTAP 2.1) whose keys the TPM makes and
/// keeps, serving CTAPHID reports on a Unix socket. It stays in the foreground, as the ssh agent
/// does, and its first line says where it listens.
@main
struct PasskeysCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tpm-keychain-passkeys",
        abstract: "A passkey (FIDO2) authenticator whose keys the TPM makes and never lets out.",
        discussion: """
            Serves CTAP 2.1 as CTAPHID reports on a Unix socket (64 bytes each way, as a HID \
            device's), to this user's programs only. Each passkey is a key item of the keychain, \
            tagged passkey (`tpm-keychain key list` shows them); the PIN, once a client sets it, is \
            checked by the TPM under its dictionary-attack lockout. Each registration, sign-in and \
            reset asks the person through --presence-command, naming the site and the program; \
            without one, every request that needs the person present is refused. With --fprintd a \
            fingerprint verifies the user; a passkey made so is bound to the enrolled fingers, and \
            the TPM refuses it for good once they change.

            \(ExitStatus.helpText)
            """)

    @OptionGroup var store: KeychainOptions

    @Option(
        name: .customLong("socket"),
        help: ArgumentHelp(
            "The socket's path; default $XDG_RUNTIME_DIR/tpm-keychain/passkeys.socket.", valueName: "socket"))
    var socket: String?

    @Option(
        name: .customLong("presence-command"),
        help: ArgumentHelp(
            "A command that asks the person to confirm (tpm-keychain confirm, a dialog); the question is in TPM_KEYCHAIN_PROMPT_REASON, exit status 0 is yes.",
            valueName: "command"))
    var presenceCommand: String?

    @Flag(
        help:
            "Verify fingerprints through fprintd (system bus) as built-in user verification; a passkey made with a verified finger is bound to the fingers enrolled then."
    )
    var fprintd = false

    @Option(
        name: .customLong("passcode-command"),
        help: ArgumentHelp(
            "Without --fprintd: verify the user by the device passcode, which this command asks for and prints (the TPM checks it); the reason is in TPM_KEYCHAIN_PROMPT_REASON.",
            valueName: "command"))
    var passcodeCommand: String?

    @Option(
        name: .customLong("fprintd-address"),
        help: ArgumentHelp("fprintd's bus, instead of the system bus.", visibility: .hidden))
    var fprintdAddress: String?

    @Flag(
        help:
            "Also be a HID security key through the kernel's UHID (/dev/uhid), which browsers and libfido2 find; fails where the kernel has no UHID."
    )
    var uhid = false

    static func main() {
        CommandStart.prepare()
        main(nil)
    }

    func run() throws {
        try reportingErrors {
            let path = try socket ?? RuntimeSockets.directory(option: "--socket") + "/passkeys.socket"
            let ask = presenceCommand.map(PasscodeCommand.confirmation)
            try StoreSession.withExisting(store.path) { session in
                let presence: @Sendable (String) -> Bool = { question in
                    guard let ask else { return false }
                    return SynchronousWait.run { await ask(question) != .refused }
                }
                var configuration = PasskeyAuthenticator.Configuration(location: session.location, presence: presence)
                if fprintd || fprintdAddress != nil {
                    configuration.fingerprints = FprintdAuthenticator(busAddress: fprintdAddress)
                }
                configuration.passcode = passcodeCommand.map(PasscodeCommand.source)
                let log: @Sendable (String) -> Void = { writeStandardError("tpm-keychain-passkeys: " + $0 + "\n") }
                configuration.log = log
                let authenticator = PasskeyAuthenticator(configuration)
                let server: AuthenticatorServer
                do throws(OwnerSocketServerError) {
                    server = try AuthenticatorServer(socketPath: path, authenticator: authenticator, log: log)
                } catch {
                    throw CommandFailure(ExitStatus.ioError, error.description)
                }
                var made: UHIDAuthenticator?
                if uhid {
                    do throws(Errno) {
                        made = try UHIDAuthenticator(authenticator: authenticator)
                    } catch {
                        server.stop()
                        throw CommandFailure(
                            ExitStatus.unavailable,
                            error.rawValue == ENOENT
                                ? "/dev/uhid is missing: this kernel has no UHID (modprobe uhid where it has), so no HID device can be made; the socket works without --uhid"
                                : "/dev/uhid cannot be used: \(error) (a udev rule or group gives a user access to it)")
                    }
                }
                let device = made
                ProcessGuard.serveUntilInterrupted(stop: {
                    server.stop()
                    device?.stop()
                }) {
                    try? writeAll(1, Array("TPM_KEYCHAIN_PASSKEYS_SOCKET=\(server.socketPath)\n".utf8))
                    let hid = device.flatMap { device in try? JoinableThread { device.serve() } }
                    server.serve()
                    hid?.join()
                }
            }
        }
    }
}

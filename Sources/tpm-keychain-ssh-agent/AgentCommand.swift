import ArgumentParser
import CommandLineSupport
import PersonPrompts
import SSHAgent
import SystemCalls
import TPMKeychain
import TPMKeychainFprintd
import ToolSupport

#if canImport(Glibc)
import Glibc
#endif

/// `tpm-keychain-ssh-agent`: an ssh agent over the keychain's TPM keys. It stays in the
/// foreground (a systemd user service, or a shell's `&`) rather than forking as OpenSSH's agent
/// does: a service manager watches it, and its first line says where it listens.
@main
struct AgentCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tpm-keychain-ssh-agent",
        abstract: "Serve the keychain's SSH keys (TPM keys tagged ssh) to ssh, git and other SSH clients.",
        discussion: """
            Make a key with `tpm-keychain key create --label NAME --tag ssh`; its private half is \
            made in the TPM and never leaves it. The agent prints the line that points SSH clients \
            at its socket (SSH_AUTH_SOCK=...), then answers them until it is stopped. Only this \
            user's programs are served. Each signature is decided for the program asking, under \
            the key's own access control: a key that needs biometry or the passcode is opened \
            by asking the person (--fprintd, --passcode-command), naming the key and the program \
            asking, and refused when the agent has no way to ask. Keys cannot be added with \
            ssh-add: they are made in the TPM.

            \(ExitStatus.helpText)
            """)

    @OptionGroup var store: KeychainOptions

    @Option(
        name: .customShort("a"),
        help: ArgumentHelp(
            "The socket's path; default $XDG_RUNTIME_DIR/tpm-keychain/ssh-agent.socket.", valueName: "socket"))
    var socket: String?

    @OptionGroup var prompts: PersonPromptOptions

    static func main() {
        CommandStart.prepare()
        main(nil)
    }

    func run() throws {
        try reportingErrors {
            // Started by its socket unit (tpm-keychain-ssh-agent.socket), the agent serves that socket.
            let activated = activatedListeningSocket()
            let path = activated == nil ? try socketPath() : nil
            try StoreSession.withExisting(store.path) { session in
                let keyring = AgentKeyring(
                    location: session.location,
                    authenticator: prompts.asksFprintd ? FprintdAuthenticator(busAddress: prompts.fprintdAddress) : nil,
                    passcode: prompts.passcodeCommand.map(PasscodeCommand.source))
                let log: @Sendable (String) -> Void = { writeStandardError("tpm-keychain-ssh-agent: " + $0 + "\n") }
                let server: AgentServer
                if let activated {
                    server = AgentServer(listeningOn: activated, keyring: keyring, log: log)
                    log("serving \(server.socketPath), handed over by the service manager")
                } else {
                    do throws(OwnerSocketServerError) {
                        server = try AgentServer(socketPath: path ?? "", keyring: keyring, log: log)
                    } catch {
                        throw CommandFailure(ExitStatus.ioError, error.description)
                    }
                }
                // Written at once, unbuffered: whoever waits for this line reads it before any request.
                ProcessGuard.serveUntilInterrupted(stop: { server.stop() }) {
                    try? writeAll(1, Array("SSH_AUTH_SOCK=\(server.socketPath); export SSH_AUTH_SOCK;\n".utf8))
                    server.serve()
                }
            }
        }
    }

    /// `-a`, or the socket in the user's runtime directory (made 0700 when missing).
    private func socketPath() throws -> String {
        if let socket { return socket }
        let directory = try RuntimeSockets.directory(option: "-a")
        return directory + "/ssh-agent.socket"
    }
}

import ArgumentParser
import CommandLineSupport
import SystemCalls
import TPMKeychain
import ToolSupport

#if canImport(Glibc)
import Glibc
#endif

/// `hold-session`: the session holder, the warm path's server (docs/ARCHITECTURE.md, "The warm
/// path"). Run it as a systemd user service (its socket unit starts it on the first lookup).
struct HoldSession: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "hold-session",
        abstract: "Keep the user's stores open for the login session, so that lookups need no TPM command.",
        discussion: """
            Lookups of this user's programs (tpm-keychain, git-credential-tpm-keychain, SecItem and \
            the Keychain API) ask it first: it answers reads of items under the master key from \
            stores it keeps open, and the program opens the store itself for anything else. It \
            serves only this user, never hands out a key, and erases every key it holds when the \
            keychain is locked and when it stops (logout stops its unit). The socket is \
            $TPM_KEYCHAIN_SESSION_HOLDER, else $XDG_RUNTIME_DIR/tpm-keychain/session.socket.

            \(ExitStatus.helpText)
            """)

    @Option(help: ArgumentHelp("The socket's path; default as above.", valueName: "path"))
    var socket: String?

    func run() throws {
        try reportingErrors {
            let log: @Sendable (String) -> Void = { writeStandardError("tpm-keychain hold-session: " + $0 + "\n") }
            let server: SessionHolderServer
            // Started by its socket unit (tpm-keychain-session.socket), the holder serves that socket.
            if let activated = activatedListeningSocket() {
                server = SessionHolderServer(listeningOn: activated, log: log)
            } else {
                let path = try socketPath()
                do throws(OwnerSocketServerError) {
                    server = try SessionHolderServer(socketPath: path, log: log)
                } catch {
                    throw CommandFailure(ExitStatus.ioError, error.description)
                }
            }
            let token = ProcessGuard.onInterruption { server.stop() }
            defer { ProcessGuard.remove(token) }
            log("serving \(server.socketPath)")
            server.serve()
        }
    }

    /// `--socket`, `TPM_KEYCHAIN_SESSION_HOLDER`, or the runtime directory's (made 0700 when missing).
    private func socketPath() throws -> String {
        if let socket { return socket }
        if let chosen = SessionHolder.socketPath, getenv(SessionHolder.socketVariable) != nil { return chosen }
        return try RuntimeSockets.directory(option: "--socket") + "/session.socket"
    }
}

import FoundationEssentials
import SystemCalls
import TPM
import TPMKeychain
import TPMSimulator
import ToolSupport

#if canImport(Glibc)
import Glibc
#endif

/// `git-credential-tpm-keychain`: git's credential helper (gitcredentials(7)) over a TPMKeychain
/// store. `git config --global credential.helper tpm-keychain` makes git run it with `get`,
/// `store` or `erase` and a credential description on standard input.
///
/// No ArgumentParser: git runs a helper for every authenticated request, so start-up is kept to
/// the Swift runtime and the store.
@main
enum GitCredentialHelper {
    static let name = "git-credential-tpm-keychain"
    /// The store when `--keychain` is not given.
    static let storeVariable = "TPM_KEYCHAIN_GIT_STORE"

    static let usage = """
        usage: \(name) [--keychain DIR] (get | store | erase)

        git's credential helper, keeping credentials in a keychain store whose master key is sealed to
        the TPM. Set it up with: git config --global credential.helper tpm-keychain
        git then runs it with a credential description (key=value lines) on standard input.

        Options:
          --keychain DIR   the store (default: $\(storeVariable), else
                           \(KeychainLocation.default.path)); created by the first store
          -h, --help       show this text

        The TPM: TPM_KEYCHAIN_TCTI if set; else the simulated TPM the store was created with; else the
        hardware TPM at /dev/tpmrm0. Where neither is usable, store fails saying what to do, unless
        TPM_KEYCHAIN_ALLOW_SIMULATED=1: then the store gets a simulated TPM of its own (not bound to
        hardware: a copy of the directory opens it), reported on every store and get.
        get and erase never create a store.
        Other actions are ignored, as git asks of helpers.

        Exit status: 0 success (also when nothing matches), 64 usage, 65 unusable data, 69 TPM
        unavailable, 70 internal error, 74 I/O error, 75 temporary failure, 77 permission; as tpm-keychain.
        """

    static func main() {
        ProcessGuard.install(programName: name)
        exit(run())
    }

    /// Runs the action and reports any failure on standard error; returns the exit status. Every
    /// session is closed (keys erased, a simulated TPM stopped) before this returns.
    static func run() -> Int32 {
        do {
            guard let invocation = try Invocation(arguments: try utf8Arguments()) else {
                print(usage)
                return 0
            }
            let description = try CredentialMessage(parsing: try readStandardInput())
            try perform(invocation, GitCredential(description))
            return 0
        } catch let error as KeychainError {
            printError("\(name): \(error)" + (Remedy.forKeychainError(error).map { "\n\(name): \($0)" } ?? ""))
            return ExitStatus.forKeychainError(error.code)
        } catch let error as TPMError {
            printError("\(name): \(error)")
            return ExitStatus.forTPMError(error.code)
        } catch let error as SoftwareTPMError {
            printError("\(name): cannot start the embedded TPM simulator: \(error)")
            return ExitStatus.unavailable
        } catch let failure as HelperFailure {
            printError("\(name): \(failure)")
            return failure.status
        } catch {
            printError("\(name): \(error)")
            return ExitStatus.software
        }
    }

    static func perform(_ invocation: Invocation, _ credential: GitCredential) throws {
        switch invocation.action {
        case "get":
            guard CredentialStore.isLookup(credential), try storeExists(invocation.storePath) else { return }
            // Reading never starts a simulated TPM for a store that has none.
            let session = try StoreSession(path: invocation.storePath, choice: .automatic, announceSimulation: false)
            defer { session.close() }
            if case .simulatedInStore = session.tpm.source {
                printError("\(name): warning: \(invocation.storePath) uses a simulated TPM (\(session.tpm.summary))")
            }
            if let answer = try CredentialStore(location: session.location).get(credential) {
                // A stored value with a line break would hand git attributes of someone's choosing.
                if let key = answer.unsafeKey {
                    throw HelperFailure(
                        ExitStatus.dataError,
                        "the stored \(key) for this credential contains a line break or NUL, which git would read as further attributes: not answering (delete it with tpm-keychain delete-internet-password)"
                    )
                }
                try writeStandardOutput(answer.encoded)
            }
        case "store":
            guard CredentialStore.isStorable(credential) else { return }
            _ = try StoredSecret(credential) // refuse what cannot be stored before a TPM is started
            // The moment a secret is handed over, a simulated TPM is reported.
            let session = try StoreSession(
                path: invocation.storePath,
                choice: StoreTPM.simulationAllowedByEnvironment ? .automaticOrSimulated : .automatic,
                announceSimulation: true)
            defer { session.close() }
            try CredentialStore(location: session.location).store(credential)
        case "erase":
            guard CredentialStore.isErasePattern(credential), try storeExists(invocation.storePath) else { return }
            let session = try StoreSession(path: invocation.storePath, choice: .automatic, announceSimulation: false)
            defer { session.close() }
            _ = try CredentialStore(location: session.location).erase(credential)
        default:
            // gitcredentials(7): a helper silently ignores operations it does not know.
            return
        }
    }

    /// Whether a store exists at `path` (without the TPM); false when there is none yet, an
    /// error when the directory is damaged, foreign or unreadable.
    static func storeExists(_ path: String) throws(KeychainError) -> Bool {
        do {
            try KeychainLocation(path: path).checkStore()
            return true
        } catch  where error.code == .storeNotFound {
            return false
        }
    }

    /// Arguments as text. Bytes that are not UTF-8 would become U+FFFD, and a path then another
    /// directory: refused instead.
    static func utf8Arguments() throws(HelperFailure) -> [String] {
        var arguments: [String] = []
        for index in 1..<Int(CommandLine.argc) {
            guard let raw = CommandLine.unsafeArgv[index], let text = String(validatingCString: raw) else {
                throw HelperFailure(ExitStatus.usage, "argument \(index) is not valid UTF-8; paths must be UTF-8 text")
            }
            arguments.append(text)
        }
        return arguments
    }

    /// Standard input up to the blank line that ends a description, or its end.
    static func readStandardInput() throws(HelperFailure) -> [UInt8] {
        var input: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while !Self.hasBlankLine(input) {
            let count: Int
            do {
                count = try retryingInterrupts {
                    buffer.withUnsafeMutableBytes { Glibc.read(STDIN_FILENO, $0.baseAddress, $0.count) }
                }
            } catch {
                throw HelperFailure(
                    ExitStatus.ioError, "cannot read the credential description from standard input: \(error)")
            }
            if count == 0 { break }
            input += buffer[0..<count]
            guard input.count <= CredentialMessage.maximumSize else {
                throw HelperFailure(
                    ExitStatus.usage, "the credential description is over \(CredentialMessage.maximumSize) bytes")
            }
        }
        return input
    }

    /// Whether `input` holds a line with nothing in it (a carriage return aside).
    private static func hasBlankLine(_ input: [UInt8]) -> Bool {
        var lineHasContent = false
        for byte in input {
            if byte == UInt8(ascii: "\n") {
                if !lineHasContent { return true }
                lineHasContent = false
            } else if byte != UInt8(ascii: "\r") {
                lineHasContent = true
            }
        }
        return false
    }

    static func writeStandardOutput(_ bytes: [UInt8]) throws(HelperFailure) {
        do {
            try writeAll(STDOUT_FILENO, bytes)
        } catch {
            throw HelperFailure(ExitStatus.ioError, "cannot write the credential to standard output: \(error)")
        }
    }
}

/// The command line: the action and the store.
struct Invocation {
    let action: String
    /// Absolute.
    let storePath: String

    /// nil for `--help`.
    ///
    /// - Throws: ``HelperFailure`` (usage) for an unknown option, a missing action or value.
    init?(
        arguments: [String], environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws(HelperFailure) {
        var keychain: String?
        var positional: [String] = []
        var remaining = arguments[...]
        while let argument = remaining.popFirst() {
            switch argument {
            case "-h", "--help":
                return nil
            case "--keychain":
                guard let value = remaining.popFirst() else {
                    throw HelperFailure(ExitStatus.usage, "--keychain needs a directory")
                }
                keychain = value
            case _ where argument.hasPrefix("--keychain="):
                keychain = String(argument.dropFirst("--keychain=".count))
            case "--":
                positional += remaining
                remaining = []
            case _ where argument.hasPrefix("-") && argument.count > 1:
                throw HelperFailure(ExitStatus.usage, "unknown option \(argument)\n\(GitCredentialHelper.usage)")
            default:
                positional.append(argument)
            }
        }
        guard positional.count == 1, let action = positional.first else {
            throw HelperFailure(
                ExitStatus.usage,
                positional.isEmpty
                    ? "no action given (get, store or erase)\n\(GitCredentialHelper.usage)"
                    : "one action expected, got \(positional.count)")
        }
        let path =
            keychain ?? environment[GitCredentialHelper.storeVariable].flatMap { $0.isEmpty ? nil : $0 }
            ?? KeychainLocation.default.path
        guard !path.isEmpty else { throw HelperFailure(ExitStatus.usage, "--keychain needs a directory") }
        self.action = action
        storePath = StoreDirectory.absolute(path)
    }
}

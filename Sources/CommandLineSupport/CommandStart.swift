import ToolSupport

#if canImport(Glibc)
import Glibc
#endif

/// What every binary of the CLI does before it parses its arguments: the process guards
/// (``ProcessGuard``: no core dumps, crashes and interruptions end in order), then a refusal of
/// arguments that are not UTF-8, which Swift would turn into U+FFFD, so that two different names
/// would name the same item (or a path another directory).
package enum CommandStart {
    /// Guards the process and exits 64 when an argument is not UTF-8.
    package static func prepare() {
        ProcessGuard.install(programName: "tpm-keychain")
        if let position = firstArgumentThatIsNotUTF8() {
            printError("tpm-keychain: argument \(position) is not valid UTF-8; names and paths must be UTF-8 text")
            exit(ExitStatus.usage)
        }
    }

    /// The 1-based position of the first argument whose bytes are not UTF-8, if any.
    private static func firstArgumentThatIsNotUTF8() -> Int? {
        for index in 1..<Int(CommandLine.argc) {
            guard let raw = CommandLine.unsafeArgv[index] else { continue }
            if String(validatingCString: raw) == nil { return index }
        }
        return nil
    }
}

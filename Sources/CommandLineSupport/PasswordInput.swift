package import FoundationEssentials
import SystemCalls
package import ToolSupport

#if canImport(Glibc)
import Glibc
#endif

/// A password as given: text when it is UTF-8 (stored as a string item), else raw bytes.
package enum PasswordValue {
    case text(String)
    case bytes(Data)

    package init(_ data: Data) {
        if let text = String(validating: data, as: UTF8.self) { self = .text(text) } else { self = .bytes(data) }
    }

    package var isEmpty: Bool {
        switch self {
        case .text(let text): text.isEmpty
        case .bytes(let bytes): bytes.isEmpty
        }
    }
}

/// Reads a password from standard input, so that it never appears in argv (visible to every user
/// through /proc) or in shell history.
package enum PasswordInput {
    /// The store refuses larger values anyway; stop reading rather than fill memory first.
    package static let maximumSize = 16 << 20

    /// The password of an `add-*-password` verb: the one given with `-w`, after warning that
    /// every local user can read it while the command runs; else ``read(prompt:)``, refusing an
    /// empty one unless `allowEmpty`.
    ///
    /// - Throws: ``CommandFailure`` (usage) for an empty password from standard input, and what
    ///   ``read(prompt:)`` throws.
    package static func forNewItem(given password: String?, allowEmpty: Bool) throws(CommandFailure) -> PasswordValue {
        if let password {
            printError(
                "tpm-keychain: warning: a password given with -w can be read by every local user (ps, /proc/<pid>/cmdline) until the command overwrites it as it starts, and stays in the shell's history; give it on standard input instead"
            )
            return .text(password)
        }
        let value = try read(prompt: "password data for new item: ")
        if value.isEmpty && !allowEmpty {
            throw CommandFailure(
                ExitStatus.usage,
                "the password read from standard input is empty; nothing was stored (use --allow-empty to store an empty password)"
            )
        }
        return value
    }

    /// On a terminal: prompts on stderr with echo off and reads one line. Otherwise: reads all of
    /// standard input and drops one trailing newline (what `echo` and here-strings add).
    ///
    /// - Throws: ``CommandFailure`` when standard input cannot be read or is too large.
    package static func read(prompt: String) throws(CommandFailure) -> PasswordValue {
        if isatty(STDIN_FILENO) == 1 {
            return PasswordValue(try readLineWithoutEcho(prompt: prompt))
        }
        var data = try readAll()
        if data.last == UInt8(ascii: "\n") { data.removeLast() }
        return PasswordValue(data)
    }

    private static func readAll() throws(CommandFailure) -> Data {
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count: Int
            do {
                count = try retryingInterrupts {
                    buffer.withUnsafeMutableBytes { Glibc.read(STDIN_FILENO, $0.baseAddress, $0.count) }
                }
            } catch {
                throw CommandFailure(ExitStatus.ioError, "cannot read the password from standard input: \(error)")
            }
            if count == 0 { return data }
            data.append(contentsOf: buffer[0..<count])
            guard data.count <= maximumSize + 1 else {
                throw CommandFailure(
                    ExitStatus.usage, "the password on standard input is larger than \(maximumSize) bytes")
            }
        }
    }

    private static func readLineWithoutEcho(prompt: String) throws(CommandFailure) -> Data {
        var saved = termios()
        let haveTerminal = tcgetattr(STDIN_FILENO, &saved) == 0
        var restoreToken: Int?
        if haveTerminal {
            // Echo comes back if the user interrupts the prompt (Ctrl-C, hangup, kill).
            let original = saved
            restoreToken = ProcessGuard.onInterruption {
                var terminal = original
                _ = tcsetattr(STDIN_FILENO, TCSAFLUSH, &terminal)
            }
            var quiet = saved
            quiet.c_lflag &= ~tcflag_t(ECHO)
            _ = tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet)
        }
        // Prompt only once echo is off: TCSAFLUSH discards what was typed before it (as getpass(3)).
        writeStandardError(prompt)
        defer {
            if haveTerminal {
                _ = tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved)
            }
            restoreToken.map(ProcessGuard.remove)
            // The newline the user typed was not echoed.
            writeStandardError("\n")
        }
        var line = Data()
        var byte: UInt8 = 0
        while true {
            let count: Int
            do {
                count = try retryingInterrupts { Glibc.read(STDIN_FILENO, &byte, 1) }
            } catch {
                throw CommandFailure(ExitStatus.ioError, "cannot read the password from the terminal: \(error)")
            }
            if count == 0 || byte == UInt8(ascii: "\n") { return line }
            line.append(byte)
            guard line.count <= maximumSize else {
                throw CommandFailure(ExitStatus.usage, "the password is larger than \(maximumSize) bytes")
            }
        }
    }
}

import ArgumentParser
import CommandLineSupport
import FoundationEssentials
import ToolSupport

#if canImport(Glibc)
import Glibc
#endif

/// `tpm-keychain confirm`: a prompter for the Secret Service's `--confirm-command`. It puts the
/// question (`TPM_KEYCHAIN_PROMPT_REASON`, which names the program, the chain that started it
/// and what it asks for) to the person on the controlling terminal, and answers as the daemon
/// reads a confirm command: exit 0 for yes, with `remember` or `session` printed for a yes that
/// lasts; anything else is no.
struct Confirm: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "confirm",
        abstract: "Ask the person on this terminal a confirm-each-access question (--confirm-command).",
        discussion: """
            tpm-keychain secret-service --confirm-command "tpm-keychain confirm" asks on the \
            terminal the daemon runs in. Answers: y (this read), r (remember: this program from \
            now on), s (this login session), n or anything else (no). No terminal is no.
            """)

    func run() throws {
        let question = getenv("TPM_KEYCHAIN_PROMPT_REASON").map { String(cString: $0) } ?? ""
        guard !question.isEmpty else {
            Self.complain("TPM_KEYCHAIN_PROMPT_REASON holds no question")
            throw ExitCode(ExitStatus.usage)
        }
        let terminal = open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC)
        guard terminal >= 0 else {
            Self.complain("no terminal to ask on: the answer is no")
            throw ExitCode.failure
        }
        defer { close(terminal) }
        let prompt = "\(question)\n[y] this once, [r] remember, [s] this session, [n] no: "
        _ = prompt.utf8CString.withUnsafeBufferPointer { write(terminal, $0.baseAddress, $0.count - 1) }
        var answer: [UInt8] = []
        var byte: UInt8 = 0
        while answer.count < 64, read(terminal, &byte, 1) == 1, byte != UInt8(ascii: "\n") { answer.append(byte) }
        switch String(decoding: answer, as: UTF8.self).filter({ !$0.isWhitespace }).lowercased() {
        case "y", "yes": return
        case "r", "remember": print("remember")
        case "s", "session": print("session")
        default: throw ExitCode.failure
        }
    }

    private static func complain(_ message: String) {
        let line = Array("tpm-keychain confirm: \(message)\n".utf8)
        _ = line.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
    }
}

import SystemCalls
package import TPMKeychain
import WireFormat

/// The device passcode from a command the person answers (systemd-ask-password, a dialog):
/// its standard output up to the first line break. Run through /bin/sh with the reason in
/// `TPM_KEYCHAIN_PROMPT_REASON`; a status other than 0 is a cancel.
package enum PasscodeCommand {
    /// A question put to `command`: exit status 0 is yes, for this once; yes with `remember` as
    /// the first line of its output is yes from now on (a grant), with `session` for this login
    /// session. Anything else is no.
    package static func confirmation(_ command: String) -> @Sendable (String) async -> Confirmation {
        { question in
            await run(command, reason: question) { status, output in
                guard status == 0 else { return .refused }
                let line = String(decoding: output.prefix { $0 != UInt8(ascii: "\n") }, as: UTF8.self)
                switch line.trimmingWhitespace() {
                case "remember": return .remembered
                case "session": return .forTheSession
                default: return .once
                }
            }
        }
    }

    package static func source(_ command: String) -> PasscodeSource {
        .secret { reason in
            await run(command, reason: reason) { status, output in
                guard status == 0 else { return nil }
                let line = output.prefix { $0 != UInt8(ascii: "\n") }
                return SecretBytes(count: line.count) { buffer in buffer.copyBytes(from: line) }
            }
        }
    }

    /// Runs `command` through /bin/sh with the reason in `TPM_KEYCHAIN_PROMPT_REASON` and this
    /// process's environment less what no child gets (``ChildEnvironment``), then hands `answer`
    /// its exit status (-1 when it could not start or was killed) and standard output, which is
    /// zeroized afterwards (it may hold a passcode); its standard error is ours, for the log. A person may take minutes to answer, so the
    /// wait is on a thread of its own, never one of the concurrency pool's.
    private static func run<Answer: Sendable>(
        _ command: String, reason: String, answer: @escaping @Sendable (Int32, [UInt8]) -> Answer
    ) async -> Answer {
        await withCheckedContinuation { (continuation: CheckedContinuation<Answer, Never>) in
            let environment =
                ChildEnvironment.current().filter { !$0.hasPrefix("TPM_KEYCHAIN_PROMPT_REASON=") }
                + ["TPM_KEYCHAIN_PROMPT_REASON=\(reason)"]
            do {
                try DetachedThread.start {
                    guard
                        var run = try? ChildProcess.run(
                            "/bin/sh", arguments: ["-c", command], environment: environment,
                            standardError: .inherited, limit: 64 * 1024)
                    else { return continuation.resume(returning: answer(-1, [])) }
                    defer { erase(&run.output) }
                    let status: Int32 =
                        switch run.termination {
                        case .exited(let code): code
                        case .signaled: -1
                        }
                    continuation.resume(returning: answer(status, run.output))
                }
            } catch {
                continuation.resume(returning: answer(-1, []))
            }
        }
    }
}

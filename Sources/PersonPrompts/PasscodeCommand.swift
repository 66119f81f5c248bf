import Foundation
package import TPMKeychain

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
                switch line.trimmingCharacters(in: .whitespaces) {
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

    /// Runs `command` through /bin/sh with the reason in `TPM_KEYCHAIN_PROMPT_REASON`, then hands
    /// `answer` its exit status (-1 when it could not start) and standard output, which is
    /// zeroized afterwards (it may hold a passcode). Waits without holding a thread.
    private static func run<Answer: Sendable>(
        _ command: String, reason: String, answer: @escaping @Sendable (Int32, [UInt8]) -> Answer
    ) async -> Answer {
        await withCheckedContinuation { (continuation: CheckedContinuation<Answer, Never>) in
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/bin/sh")
            process.arguments = ["-c", command]
            var environment = ProcessInfo.processInfo.environment
            environment["TPM_KEYCHAIN_PROMPT_REASON"] = reason
            process.environment = environment
            let output = Pipe()
            process.standardOutput = output
            process.standardInput = FileHandle.nullDevice
            process.terminationHandler = { finished in
                var data = output.fileHandleForReading.readDataToEndOfFile()
                var bytes = [UInt8](data)
                data.resetBytes(in: 0..<data.count)
                defer { for index in bytes.indices { bytes[index] = 0 } }
                continuation.resume(returning: answer(finished.terminationStatus, bytes))
            }
            do {
                try process.run()
            } catch {
                continuation.resume(returning: answer(-1, []))
            }
        }
    }
}

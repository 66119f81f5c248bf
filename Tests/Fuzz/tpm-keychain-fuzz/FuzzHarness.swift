// tpm-keychain-fuzz: every parser of untrusted bytes under libFuzzer.
//
//     Scripts/fuzz.sh [executions per target]           builds with -sanitize=fuzzer and runs all
//     FUZZ_TARGET=key-record tpm-keychain-fuzz CORPUS   libFuzzer's own options work (-runs=N, ...)
//     tpm-keychain-fuzz --replay FILE...                 built normally: each file through its
//                                                        target (named by its directory)
//
// Targets: ParserFuzzing.targets (the store's files), "git-credential" (the git helper's input),
// "archive-record" (an export archive's records, after their chunk authenticates),
// "password-csv", "password-json" (password managers' exports, read by `import`), and
// "agent-request", "ssh-key-blob" (what the ssh agent reads from its clients).
// Seed corpora: Fixtures/fuzz/<target>/.
import CFuzzing
import Foundation
import KeychainStore
import KeychainTransfer
import SSHAgent
import TPMKeychain
import ToolSupport

enum Harness {
    static let targets =
        ParserFuzzing.targets + [
            "git-credential", "archive-record", "password-csv", "password-json", "agent-request", "ssh-key-blob",
        ]

    /// Runs one input; returns a description of a property that failed (a finding), else nil.
    static func run(_ target: String, _ bytes: [UInt8]) -> String? {
        switch target {
        case "git-credential": return gitCredential(bytes)
        case "archive-record": return archiveRecord(bytes)
        case "password-csv":
            _ = try? PasswordManagerExport.items(csv: String(decoding: bytes, as: UTF8.self))
            return nil
        case "password-json":
            _ = try? PasswordManagerExport.items(json: bytes)
            return nil
        case "agent-request": return agentRequest(bytes)
        case "ssh-key-blob": return sshKeyBlob(bytes)
        default: break
        }
        switch ParserFuzzing.run(target, bytes) {
        case .handled: return nil
        case .violated(let property): return property
        case .unknownTarget: return "unknown target \(target); targets: \(targets.joined(separator: ", "))"
        }
    }

    /// git's credential description: what parses re-encodes to a description that parses to the
    /// same attributes (values ending in a carriage return excepted: git drops one, as we do).
    static func gitCredential(_ bytes: [UInt8]) -> String? {
        guard let message = try? CredentialMessage(parsing: bytes) else { return nil }
        if message.attributes.contains(where: { $0.value.last == UInt8(ascii: "\r") }) { return nil }
        guard let again = try? CredentialMessage(parsing: message.encoded) else {
            return "a parsed credential description does not parse after re-encoding"
        }
        guard again.attributes.map(\.key) == message.attributes.map(\.key),
            again.attributes.map(\.value) == message.attributes.map(\.value)
        else {
            return "a credential description changed through a re-encoding"
        }
        return nil
    }

    /// An archive's record: an item that parses re-encodes to the same bytes (the encoding is
    /// canonical, so what an export wrote is what an import reads).
    static func archiveRecord(_ bytes: [UInt8]) -> String? {
        guard case .item(let item) = try? ArchiveFormat.record(bytes, path: "fuzz") else { return nil }
        return ArchiveFormat.itemRecord(item) == bytes ? nil : "an archive item record changed through a re-encoding"
    }

    /// An ssh agent request: a sign request that parses re-encodes to the same bytes (nothing of
    /// a client's message is skipped or read twice).
    static func agentRequest(_ bytes: [UInt8]) -> String? {
        guard case .sign(let blob, let data, let flags) = try? AgentRequest(parsing: bytes) else { return nil }
        var writer = SSHWireWriter()
        writer.byte(13)
        writer.string(blob)
        writer.string(data)
        writer.uint32(flags)
        return writer.bytes == bytes ? nil : "an agent sign request changed through a re-encoding"
    }

    /// A key blob a client names: one that gives a P-256 point is that point's own blob.
    static func sshKeyBlob(_ bytes: [UInt8]) -> String? {
        guard let point = SSHECDSAKey.publicKey(ofBlob: bytes) else { return nil }
        return SSHECDSAKey.blob(publicKey: point) == bytes ? nil : "a key blob changed through a re-encoding"
    }

    nonisolated(unsafe) static var target = ""
}

@main
struct FuzzMain {
    static func main() {
        var argc = CommandLine.argc
        var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
        Harness.target = ProcessInfo.processInfo.environment["FUZZ_TARGET"] ?? ""
        let arguments = Array(CommandLine.arguments.dropFirst())
        if arguments.first != "--replay" {
            guard Harness.targets.contains(Harness.target) else {
                FileHandle.standardError.write(
                    Data("set FUZZ_TARGET to one of: \(Harness.targets.joined(separator: ", "))\n".utf8))
                exit(64)
            }
            let status = tk_fuzz_run(&argc, &argv) { data, size in
                let bytes = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
                if let finding = Harness.run(Harness.target, bytes) {
                    FileHandle.standardError.write(Data("finding: \(finding)\n".utf8))
                    abort() // libFuzzer saves the input as a crash
                }
                return 0
            }
            guard status >= 0 else {
                FileHandle.standardError.write(
                    Data("this build has no fuzzer (build it with Scripts/fuzz.sh); use --replay FILE...\n".utf8))
                exit(64)
            }
            exit(status)
        }
        var findings = 0
        for path in arguments.dropFirst() {
            guard let data = FileManager.default.contents(atPath: path) else { continue }
            let target =
                Harness.targets.contains(Harness.target)
                ? Harness.target : URL(fileURLWithPath: path).deletingLastPathComponent().lastPathComponent
            if let finding = Harness.run(target, Array(data)) {
                print("\(path): \(finding)")
                findings += 1
            }
        }
        exit(findings == 0 ? 0 : 1)
    }
}

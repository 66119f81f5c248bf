import ArgumentParser
import FoundationEssentials
import TPMKeychain
import ToolSupport

/// `tpm-keychain doctor`: whether this machine is ready for the keychain, and what to do when not.
struct Doctor: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "doctor",
        abstract: "Say whether this machine is ready for the keychain, and what to do where it is not.",
        discussion: """
            Checks the TPM (the device and this user's access to it, or the TPM that \
            TPM_KEYCHAIN_TCTI names; its dictionary-attack state, owner password and NV room), \
            swtpm, every store of the data directory and the one --keychain names (without \
            opening them), fingerprint authentication through fprintd, and the login hook. It \
            changes nothing: no store is opened, no simulator started, no TPM state written. Each \
            line says ok, warning, problem or info, with what to do. Exit status 0 when nothing is \
            a problem, 69 otherwise.
            """)

    @Option(
        name: .long, help: ArgumentHelp("Also check the store in this directory.", valueName: "dir"),
        completion: .directory)
    var keychain: String?

    @Flag(help: "Print the findings as one JSON object (README, \"Is my machine ready?\").")
    var json = false

    func run() throws {
        var stores = KeychainLocation.storeNames().map { KeychainLocation.dataDirectory + "/" + $0 }
        let defaultPath = KeychainLocation.default.path
        if !stores.contains(defaultPath) { stores.insert(defaultPath, at: 0) }
        if let keychain {
            let path = StoreDirectory.absolute(keychain)
            if !stores.contains(path) { stores.append(path) }
        }
        let findings = ReadinessChecks(stores: stores, environment: ProcessInfo.processInfo.environment).run()
        let problems = findings.filter { $0.verdict == .problem }.count
        let warnings = findings.filter { $0.verdict == .warning }.count
        let verdict =
            problems > 0
            ? "not ready: \(problems) problem\(problems == 1 ? "" : "s")"
            : warnings > 0 ? "ready, with \(warnings) warning\(warnings == 1 ? "" : "s")" : "ready"
        if json {
            print(Self.json(findings, verdict: verdict, ready: problems == 0))
        } else {
            for finding in findings {
                print(Self.line(finding))
            }
            print("verdict: \(verdict)")
        }
        if problems > 0 { throw ExitCode(ExitStatus.unavailable) }
    }

    /// `problem  tpm device  …`, with the remedy on the next line.
    static func line(_ finding: Finding) -> String {
        let verdict = String((finding.verdict.rawValue + String(repeating: " ", count: 8)).prefix(8))
        var text = verdict + " " + finding.check + ": " + finding.summary
        if let remedy = finding.remedy { text += "\n         -> " + remedy }
        return text
    }

    static func json(_ findings: [Finding], verdict: String, ready: Bool) -> String {
        struct Report: Encodable {
            let ready: Bool
            let verdict: String
            let findings: [Finding]
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let data = (try? encoder.encode(Report(ready: ready, verdict: verdict, findings: findings))) ?? Data()
        return String(decoding: data, as: UTF8.self)
    }
}

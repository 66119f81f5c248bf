import Foundation
import TPM
import TPMKeychainTesting

#if canImport(Glibc)
import Glibc
#endif

/// Benchmarks, each figure next to a floor measured the same way in the same run:
///
///     Scripts/benchmarks.sh [SUITE] [iterations]
///
/// builds the C floor, this program and the CLI as it ships, then runs it. Suites: tpm, store
/// (store-get, store-set, store-list, store-scale), storage, rotate, secitem (secitem-get), access, keys, cli; all by default.
///
/// - tpm: the TPM layer on swtpm (or the TPM in TPM_KEYCHAIN_TCTI), with the C floor (ESAPIFloor,
///   the same round trips without this layer) run against the same TPM.
/// - store: the item store's gets, durable sets and gets among 100,000 items (StoreBenchmarks).
/// - access: access control: a protected get inside a reuse window, a first protected get against
///   the C floor's unseal of a key record, and the TPM commands of each operation (AccessBenchmarks).
/// - storage: KeychainStorageCompat with and without a Cipher, and changeCipher (StorageBenchmarks).
/// - rotate: rotating the master key of 1,000 and 10,000 items (RotationBenchmarks).
/// - secitem: SecurityCompat's SecItem calls next to the Keychain API on the same store (SecItemBenchmarks).
/// - keys: a signature with a P-256 key made in the TPM, against the C floor's TPM2_Sign (KeyBenchmarks).
/// - agent: a signature through the ssh agent's socket, against the same floor (AgentBenchmarks).
/// - passkeys: a getAssertion through the passkey authenticator's socket, against the same floor
///   (PasskeyBenchmarks).
/// - cli: one `tpm-keychain find-generic-password` process against tpm2-tools and systemd-creds
///   (CLIBenchmarks).
/// - cold-lookup: `tpm-keychain find-generic-password` as a process in stores of 10,000 and
///   100,000 items, against the same in a store of 100 (ColdLookupBenchmarks).
/// - transfer: `tpm-keychain export` and `import` of 1,000 to 100,000 items, time and peak memory
///   of each process (TransferBenchmarks).
///
/// Each figure is the median and 90th percentile of timed runs after warm-up. `iterations`
/// overrides every suite's default count; a bare number (`TPMBenchmarks 300`) runs the tpm suite.
@main
struct TPMBenchmarks {
    static func main() throws {
        var arguments = Array(CommandLine.arguments.dropFirst())
        var suite = "all"
        if let first = arguments.first, Int(first) == nil {
            suite = first
            arguments.removeFirst()
        } else if !arguments.isEmpty {
            suite = "tpm"
        }
        let iterations = arguments.first.flatMap(Int.init)
        guard
            [
                "tpm", "store", "store-get", "store-set", "store-list", "store-scale", "cli", "access", "access-first",
                "keys", "agent", "passkeys",
                "secitem",
                "secitem-get",
                "storage", "rotate", "transfer", "cold-lookup", "all",
            ].contains(suite)
        else {
            print(
                "usage: TPMBenchmarks [tpm|store|store-get|store-set|store-list|store-scale|cli|access|access-first|keys|agent|passkeys|secitem|storage|rotate|transfer|cold-lookup|all] [iterations]"
            )
            exit(64)
        }
        print(machineDescription())
        print(
            "method: median and p90 of timed runs after warm-up; each floor is timed in the same run, interleaved with ours where both are in-process"
        )
        let summary = Summary()

        if suite == "tpm" || suite == "all" || suite.hasPrefix("store") {
            let simulator = TPMConfiguration.environmentTCTI == nil ? try SoftwareTPM.start() : nil
            defer { simulator?.stop() }
            let configuration = TPMConfiguration(tcti: TPMConfiguration.environmentTCTI ?? simulator!.tcti)
            if !suite.hasPrefix("store") {
                try runTPMSuite(configuration, simulator: simulator, iterations: iterations ?? 300)
            }
            if suite != "tpm" {
                try StoreBenchmarks(
                    tpm: configuration, summary: summary, iterations: iterations, getsOnly: suite == "store-get",
                    listingOnly: suite == "store-list", setOnly: suite == "store-set", scaleOnly: suite == "store-scale"
                ).run()
            }
        }
        if suite == "storage" || suite == "all" {
            try StorageBenchmarks(summary: summary, iterations: iterations).run()
        }
        if suite == "rotate" || suite == "all" {
            try RotationBenchmarks(summary: summary).run()
        }
        if suite.hasPrefix("secitem") || suite == "all" {
            try SecItemBenchmarks(summary: summary, iterations: iterations, getsOnly: suite == "secitem-get").run()
        }
        if suite.hasPrefix("access") || suite == "all" {
            try AccessBenchmarks(summary: summary, iterations: iterations, firstGetOnly: suite == "access-first").run()
        }
        if suite == "keys" || suite == "all" {
            try KeyBenchmarks(summary: summary, iterations: iterations).run()
        }
        if suite == "agent" || suite == "all" {
            try AgentBenchmarks(summary: summary, iterations: iterations).run()
        }
        if suite == "passkeys" || suite == "all" {
            try PasskeyBenchmarks(summary: summary, iterations: iterations).run()
        }
        if suite == "cli" || suite == "all" {
            try CLIBenchmarks(summary: summary, iterations: iterations).run()
        }
        if suite == "cold-lookup" || suite == "all" {
            try ColdLookupBenchmarks(summary: summary, iterations: iterations).run()
        }
        if suite == "transfer" || suite == "all" {
            // `iterations` here is the largest store: 1,000, 10,000 and 100,000 items by default.
            let largest = iterations ?? 100_000
            try TransferBenchmarks(
                summary: summary, sizes: Array(Set([1_000, 10_000, largest].filter { $0 <= largest })).sorted()
            ).run()
        }
        summary.printTable()
    }

    static func runTPMSuite(_ configuration: TPMConfiguration, simulator: SoftwareTPM?, iterations: Int) throws {
        print("\n== TPM layer; TPM: \(configuration.tcti); \(iterations) iterations per figure")

        let (_, sealed) = try withConnection(configuration) { try $0.generateSealedKey() }

        let cold = try measure(iterations) {
            try withConnection(configuration) { _ = try $0.unseal(sealed) }
        }
        report("cold open + unseal (connect, sweep, storage key, load, salted unseal, close)", cold)

        try withConnection(configuration) { tpm in
            let warm = try measure(iterations) { _ = try tpm.unseal(sealed) }
            report("warm unseal (connection and storage key open)", warm)
            let seal = try measure(max(iterations / 3, 10)) { _ = try tpm.generateSealedKey() }
            report("generate + seal a key (warm)", seal)
        }

        if let floor = runFloor(configuration.tcti, iterations: iterations) {
            print(floor, terminator: "")
        } else {
            print("floor: build it first with `swift build -c release --product ESAPIFloor`")
        }

        if let simulator {
            try countCommands(simulator: simulator, sealed: sealed)
        }
    }

    static func withConnection<R>(_ configuration: TPMConfiguration, _ body: (TPMConnection) throws -> R) throws -> R {
        let tpm = try TPMConnection(configuration)
        defer { tpm.close() }
        return try body(tpm)
    }

    static func measure(_ iterations: Int, _ body: () throws -> Void) throws -> [Duration] {
        let clock = ContinuousClock()
        try body()
        return try (0..<iterations).map { _ in try clock.measure(body) }.sorted()
    }

    static func report(_ what: String, _ samples: [Duration]) {
        func ms(_ duration: Duration) -> String {
            String(
                format: "%.3f ms",
                Double(duration.components.attoseconds) / 1e15 + Double(duration.components.seconds) * 1e3)
        }
        print(
            "\(what): median \(ms(samples[samples.count / 2])), p90 \(ms(samples[samples.count * 9 / 10])) (n=\(samples.count))"
        )
    }

    /// Runs ESAPIFloor from the same build directory against the same TPM.
    static func runFloor(_ tcti: String, iterations: Int) -> String? {
        let executable = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
            .appendingPathComponent("ESAPIFloor")
        guard FileManager.default.isExecutableFile(atPath: executable.path) else { return nil }
        let process = Process()
        process.executableURL = executable
        process.arguments = [tcti, String(iterations)]
        let output = Pipe()
        process.standardOutput = output
        do { try process.run() } catch { return nil }
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return String(decoding: data, as: UTF8.self)
    }

    /// The TPM commands one cold open + unseal and one warm unseal send, from the recording proxy.
    static func countCommands(simulator: SoftwareTPM, sealed: SealedObject) throws {
        let proxy = try RecordingTPMProxy.start(forwardingTo: simulator.port)
        defer { proxy.stop() }
        let configuration = TPMConfiguration(tcti: proxy.tcti)
        try withConnection(configuration) { tpm in
            _ = try tpm.unseal(sealed)
            let cold = proxy.commandCodes
            proxy.reset()
            _ = try tpm.unseal(sealed)
            print(
                "commands, cold open + unseal (\(cold.count)): \(cold.map(RecordingTPMProxy.commandName).joined(separator: ", "))"
            )
            print(
                "commands, warm unseal (\(proxy.commandCount)): \(proxy.commandCodes.map(RecordingTPMProxy.commandName).joined(separator: ", "))"
            )
            proxy.reset()
        }
        print("commands, close: \(proxy.commandCodes.map(RecordingTPMProxy.commandName).joined(separator: ", "))")
    }

    static func machineDescription() -> String {
        let cpu =
            (try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8))?
            .split(separator: "\n").first { $0.hasPrefix("model name") }?
            .split(separator: ":", maxSplits: 1).last?.trimmingCharacters(in: .whitespaces) ?? "unknown CPU"
        let memory =
            (try? String(contentsOfFile: "/proc/meminfo", encoding: .utf8))?
            .split(separator: "\n").first { $0.hasPrefix("MemTotal") }?
            .split(separator: ":", maxSplits: 1).last?.trimmingCharacters(in: .whitespaces) ?? "unknown memory"
        var system = utsname()
        uname(&system)
        let kernel = withUnsafeBytes(of: system.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        return "machine: \(cpu), \(ProcessInfo.processInfo.activeProcessorCount) cores, \(memory), Linux \(kernel)"
    }
}

import Foundation
import KeychainStore
import KeychainVocabulary
import TPM
import TPMKeychainTesting

#if canImport(Glibc)
import Glibc
#endif

/// A lookup as a whole process (`tpm-keychain find-generic-password -w`) in a store of 100, 10,000
/// and 100,000 items: what a script or the git helper pays per call as a user's store grows. The
/// stores are filled without fsync (the fill only) and then synced; each size's lookups run in
/// alternating batches with the 100-item store's, so the drift falls on both.
///
/// `TPM_KEYCHAIN_BENCH_PERF=FILE` records one lookup in the largest store with `perf record -g`
/// into FILE, for `perf report` (`TPM_KEYCHAIN_BENCH_PERF_ITEMS=100`: in the smallest).
struct ColdLookupBenchmarks {
    let summary: Summary
    let iterations: Int?

    func run() throws {
        let executable = ProcessInfo.processInfo.environment["TPM_KEYCHAIN_CLI"] ?? siblingExecutable("tpm-keychain")
        guard FileManager.default.isExecutableFile(atPath: executable) else {
            print("\n== cold lookup: build the CLI first (swift build -c release --product tpm-keychain)")
            return
        }
        let simulator = try SoftwareTPM.start()
        defer { simulator.stop() }
        let directory = try makeTemporaryDirectory("tpm-keychain-cold-lookup-bench")
        defer { removeTree(directory) }
        print("\n== cold lookup as a whole process (\(executable)); swtpm \(simulator.tcti)")
        let environment = ProcessInfo.processInfo.environment.merging(["TPM_KEYCHAIN_TCTI": simulator.tcti]) { $1 }
            .map { "\($0)=\($1)" }
        let tpm = TPMConfiguration(tcti: simulator.tcti)
        let service = "bench.cold"
        var stores: [Int: String] = [:]
        for size in [100, 10_000, 100_000] {
            let path = directory + "/store-\(size)"
            let filler = try ItemStore.open(at: path, tpm: tpm, durable: false)
            for index in 0..<size {
                try filler.write(
                    ItemIdentity(accessGroup: "", service: service, account: "account-\(index)"), mode: .upsert,
                    value: ItemValue(kind: .string, bytes: Array("value \(index)".utf8)), changes: AttributeChanges())
            }
            filler.close()
            stores[size] = path
        }
        sync()
        let rounds = iterations ?? 10
        var rows: [[String]] = []
        let small = stores[100] ?? ""
        for size in [10_000, 100_000] {
            guard let path = stores[size] else { continue }
            var ours: [Double] = []
            var baseline: [Double] = []
            var peak = 0
            var smallPeak = 0
            for round in 0..<rounds * 2 {
                // Alternating: the large store, then the 100-item one, then the other way round.
                let order = round % 2 == 0 ? [path, small] : [small, path]
                for store in order {
                    let clock = ContinuousClock()
                    let started = clock.now
                    let usage = try spawnAndWait(
                        [
                            executable, "find-generic-password", "--keychain", store, "-s", service, "-a", "account-7",
                            "-w",
                        ],
                        environment: environment, expecting: "find-generic-password")
                    let elapsed = clock.now - started
                    let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
                    if store == path {
                        ours.append(seconds)
                        peak = max(peak, usage.ru_maxrss * 1024)
                    } else {
                        baseline.append(seconds)
                        smallPeak = max(smallPeak, usage.ru_maxrss * 1024)
                    }
                }
            }
            ours.sort()
            baseline.sort()
            let median = ours[ours.count / 2]
            let smallMedian = baseline[baseline.count / 2]
            print(
                String(
                    format: "lookup in %d items: median %.1f ms (peak RSS %@); in 100 items: %.1f ms (%@); ratio %.2f×",
                    size, median * 1e3, mebibytes(peak), smallMedian * 1e3, mebibytes(smallPeak), median / smallMedian))
            rows.append([String(size), String(median), String(smallMedian), String(peak)])
        }
        PlotData.write("cold-lookup", header: ["items", "seconds", "seconds_at_100", "peak_rss_bytes"], rows: rows)
        let profiled = Int(ProcessInfo.processInfo.environment["TPM_KEYCHAIN_BENCH_PERF_ITEMS"] ?? "") ?? 100_000
        if let profile = ProcessInfo.processInfo.environment["TPM_KEYCHAIN_BENCH_PERF"], let path = stores[profiled] {
            _ = try spawnAndWait(
                [
                    "/usr/bin/perf", "record", "-F", "20000", "-g", "-o", profile, "--", executable,
                    "find-generic-password",
                    "--keychain", path, "-s", service, "-a", "account-7", "-w",
                ], environment: environment, expecting: "perf record")
            print("perf record of one lookup in \(profiled) items: \(profile)")
        }
    }
}

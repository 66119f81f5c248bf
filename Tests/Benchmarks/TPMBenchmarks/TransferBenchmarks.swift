import Foundation
import TPM
import TPMKeychain
import TPMKeychainTesting

#if canImport(Glibc)
import Glibc
#endif

/// `tpm-keychain export` and `import` of stores of growing size, each a whole process (the CLI
/// built next to this program): wall time per item and the process's peak resident memory, which
/// stays flat as the store grows because the archive is written and read one record at a time.
/// The store is filled in this process through the Keychain API.
///
/// The passphrase archives use the standard scrypt cost (N = 2^17, r = 8, p = 1: 128 MiB, the
/// floor of every export's and import's memory); the device-key archive sends one TPM ECDH.
struct TransferBenchmarks {
    let summary: Summary
    let sizes: [Int]

    func run() throws {
        let executable = ProcessInfo.processInfo.environment["TPM_KEYCHAIN_CLI"] ?? siblingExecutable("tpm-keychain")
        guard FileManager.default.isExecutableFile(atPath: executable) else {
            print("\n== transfer: build the CLI first (swift build -c release --product tpm-keychain)")
            return
        }
        let simulator = try SoftwareTPM.start()
        defer { simulator.stop() }
        let directory = try makeTemporaryDirectory("tpm-keychain-transfer-bench")
        defer { removeTree(directory) }
        print("\n== export and import (\(executable)); swtpm \(simulator.tcti); files in \(directory)")
        let environment = ProcessInfo.processInfo.environment.merging(["TPM_KEYCHAIN_TCTI": simulator.tcti]) { $1 }
            .map { "\($0)=\($1)" }
        let passphraseFile = directory + "/passphrase"
        try Data("a benchmark passphrase\n".utf8).write(to: URL(fileURLWithPath: passphraseFile))

        var rows: [[String]] = []
        for size in sizes {
            let source = directory + "/source-\(size)"
            var location = try KeychainLocation(path: source, tcti: simulator.tcti)
            location.deviceDirectory = directory + "/device"
            let keychain = try Keychain(service: "bench.transfer", location: location)
            let value = String(repeating: "v", count: 64)
            for index in 0..<size { try keychain.set(value, forKey: "account-\(index)", label: "item \(index)") }
            Keychain.closeStore(location)

            let archive = directory + "/archive-\(size).tkar"
            let export = try measuredRun(
                [executable, "export", "--keychain", source, "--output", archive, "--passphrase-fd", "0"],
                environment: environment, stdin: passphraseFile)
            let dryRun = try measuredRun(
                [
                    executable, "import", "--keychain", directory + "/dry-\(size)", archive, "--dry-run",
                    "--passphrase-fd", "0",
                ],
                environment: environment, stdin: passphraseFile)
            let target = directory + "/target-\(size)"
            let importing = try measuredRun(
                [executable, "import", "--keychain", target, archive, "--passphrase-fd", "0"],
                environment: environment, stdin: passphraseFile)
            let archiveSize = (try FileManager.default.attributesOfItem(atPath: archive)[.size] as? Int) ?? 0
            // For a device import key: no scrypt, so the peak is the records' own memory.
            let machine = directory + "/machine-\(size)"
            let key = directory + "/machine-\(size).key"
            try measuredRun(
                [executable, "device-key", "--keychain", machine], environment: environment, stdin: "/dev/null",
                stdout: key)
            let forDevice = directory + "/device-\(size).tkar"
            let deviceExport = try measuredRun(
                [executable, "export", "--keychain", source, "--output", forDevice, "--to", key],
                environment: environment, stdin: "/dev/null")
            let deviceImport = try measuredRun(
                [executable, "import", "--keychain", machine, forDevice], environment: environment, stdin: "/dev/null")
            // What opening a store of this size costs any command: the baseline of the figures above.
            let lookup = try measuredRun(
                [
                    executable, "find-generic-password", "--keychain", machine, "-s", "bench.transfer", "-a",
                    "account-0",
                ],
                environment: environment, stdin: "/dev/null")
            for (what, run) in [
                ("export --passphrase", export), ("import --dry-run", dryRun), ("import", importing),
                ("export --to", deviceExport), ("import (device key)", deviceImport),
                ("find-generic-password in the imported store", lookup),
            ] {
                print(
                    String(
                        format: "%@ of %d items: %.2f s (%.1f µs per item), peak RSS %@", what, size, run.seconds,
                        run.seconds / Double(size) * 1e6, mebibytes(run.peakResidentBytes)))
                rows.append([what, String(size), String(run.seconds), String(run.peakResidentBytes)])
            }
            print("archive of \(size) items: \(mebibytes(archiveSize))")
            removeTree(source)
            removeTree(target)
            removeTree(directory + "/dry-\(size)")
            removeTree(archive)
            removeTree(machine)
            removeTree(forDevice)
        }
        PlotData.write("transfer", header: ["operation", "items", "seconds", "peak_rss_bytes"], rows: rows)
    }

    struct Run {
        let seconds: Double
        let peakResidentBytes: Int
    }

    /// Runs `arguments` with standard input from `stdin`; its wall time and peak RSS.
    @discardableResult
    private func measuredRun(
        _ arguments: [String], environment: [String], stdin: String, stdout: String = "/dev/null"
    ) throws -> Run {
        let clock = ContinuousClock()
        let started = clock.now
        let usage = try spawnAndWait(
            arguments, environment: environment, stdin: stdin, stdout: stdout,
            expecting: arguments.dropFirst().prefix(1).joined())
        let elapsed = clock.now - started
        return Run(
            seconds: Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18,
            peakResidentBytes: usage.ru_maxrss * 1024)
    }
}

import ArgumentParser
import Crypto
import Foundation
import TPM

/// Seals a fresh master key to the TPM, stores it, and unseals it again, timing each step.
struct Demo: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Seal a master key to the TPM, store it in a file, unseal it, and time each step.")

    @Option(name: .long, help: "Directory for the sealed key file (and the simulated TPM's state, if one is needed).")
    var directory: String = DataDirectory.path + "/demo"

    @Option(name: .long, help: "A PIN to protect the key with (PolicyAuthValue); omitted: no PIN.")
    var pin: String?

    func run() throws {
        try reportingErrors {
            try AtomicFile.makeDirectory(directory)
            let selection = try TPMSelection(simulatorStateDirectory: directory + "/swtpm")
            defer { selection.stop() }
            print("TPM: \(selection.summary)")

            let keyFile = directory + "/master-key.sealed"
            let authValue = pin.map { SecretBytes(copying: Array($0.utf8)) }
            let clock = ContinuousClock()

            var connectTime = Duration.zero
            let tpm = try measured(&connectTime, clock) { try TPMConnection(selection.configuration) }
            let description = try tpm.describe()
            print("     manufacturer \(description.manufacturer), vendor \(description.vendor), firmware \(description.firmwareVersion)")
            print("connect:            \(milliseconds(connectTime))")

            let sealed: SealedObject
            let expected: SecretBytes
            if let stored = FileManager.default.contents(atPath: keyFile) {
                sealed = try SealedObject(serialized: Array(stored))
                var unsealTime = Duration.zero
                expected = try measured(&unsealTime, clock) { try tpm.unseal(sealed, authValue: authValue) }
                print("unseal stored key:  \(milliseconds(unsealTime))  (sealed by an earlier run, read from \(keyFile))")
            } else {
                var sealTime = Duration.zero
                let generated = try measured(&sealTime, clock) { try tpm.generateSealedKey(authValue: authValue) }
                (expected, sealed) = (generated.key, generated.sealed)
                try AtomicFile.write(sealed.serialized(), to: keyFile)
                print("generate + seal:    \(milliseconds(sealTime))  (written to \(keyFile), \(sealed.serialized().count) bytes)")
            }
            var warmTime = Duration.zero
            let warm = try measured(&warmTime, clock) { try tpm.unseal(sealed, authValue: authValue) }
            tpm.close()
            print("warm unseal:        \(milliseconds(warmTime))  (connection and storage key already open)")

            var coldTime = Duration.zero
            let cold = try measured(&coldTime, clock) {
                let fresh = try TPMConnection(selection.configuration)
                defer { fresh.close() }
                return try fresh.unseal(try SealedObject(serialized: Array(try Data(contentsOf: URL(fileURLWithPath: keyFile)))),
                                        authValue: authValue)
            }
            print("cold open + unseal: \(milliseconds(coldTime))  (connect, storage key, load, salted unseal, close)")

            guard warm == expected, cold == expected else {
                printError("tpm-keychain: the unsealed key differs from the sealed one")
                throw ExitCode(ExitStatus.software)
            }
            // A fingerprint, never the key: secrets do not go to terminals or logs.
            let fingerprint = expected.withUnsafeBytes { Array(SHA256.hash(data: $0)).prefix(8).map { String(format: "%02x", $0) }.joined() }
            print("master key: 32 bytes, SHA-256 fingerprint \(fingerprint); unsealed three ways, all equal")
            if selection.isSimulated {
                print("note: this TPM is SIMULATED; on a machine with a TPM the same file would be bound to its hardware")
            }
        }
    }

    private func measured<T>(_ elapsed: inout Duration, _ clock: ContinuousClock, _ body: () throws -> T) rethrows -> T {
        let start = clock.now
        defer { elapsed = clock.now - start }
        return try body()
    }
}

import Crypto
import Foundation
import TPM
import TPMKeychainTesting

/// Keys that live in the TPM: a signature with a P-256 key made there, in a fresh connection,
/// against the C floor doing the same TPM2_Sign (ESAPIFloor sign), interleaved in batches, and
/// the commands it sends.
struct KeyBenchmarks: @unchecked Sendable { // Summary is only used from one task at a time
    let summary: Summary
    let iterations: Int?

    func run() throws {
        let simulator = try SoftwareTPM.start()
        defer { simulator.stop() }
        print("\n== Keys in the TPM; swtpm \(simulator.tcti)")
        let configuration = TPMConfiguration(tcti: simulator.tcti)
        let key = try TPMBenchmarks.withConnection(configuration) { try $0.createKey(.signing) }
        let digest = Array(SHA256.hash(data: Data("a message to sign".utf8)))
        let publicKey = try P256.Signing.PublicKey(x963Representation: key.publicKey)
        // The floor loads a saved storage-key context; so does ours, from this process's memory.
        let first = try TPMBenchmarks.withConnection(configuration) { try $0.sign(digest, with: key) }
        guard
            publicKey.isValidSignature(
                try P256.Signing.ECDSASignature(rawRepresentation: first),
                for: SHA256.hash(data: Data("a message to sign".utf8)))
        else { throw BenchmarkError("the TPM's signature does not verify") }

        let batch = max((iterations ?? 200) / 10, 2)
        let (ours, floor) = try interleavedWithFloor(
            batch: batch,
            ours: { _ = try TPMBenchmarks.withConnection(configuration) { try $0.sign(digest, with: key) } },
            floor: { try AccessBenchmarks.floorSamples(simulator.tcti, $0, mode: "sign") })
        summary.add(
            Figure(
                name: "TPM key signature (P-256 ECDSA over a SHA-256 digest, fresh connection)", ours: ours,
                floorName: "C ESAPI: connect, ContextLoad, Load, salted HMAC session, Sign, flushes",
                floor: floor, goal: 1.2))

        let proxy = try RecordingTPMProxy.start(forwardingTo: simulator.port)
        defer { proxy.stop() }
        let proxied = TPMConfiguration(tcti: proxy.tcti)
        _ = try TPMBenchmarks.withConnection(proxied) { try $0.sign(digest, with: key) }
        proxy.reset()
        _ = try TPMBenchmarks.withConnection(proxied) { try $0.sign(digest, with: key) }
        let names = proxy.commandCodes.map(RecordingTPMProxy.commandName)
        print("commands, TPM key signature (\(names.count)): \(names.joined(separator: ", "))")
    }
}

import Foundation
import TPMKeychain
import TPMKeychainTesting

/// Key rotation: rotating the master key of a store of 1,000 and 10,000 items, next to
/// the floor of reading every item and writing it durably again (the same reads, decryptions,
/// encryptions and durable writes, with nothing around them: no new sealed key, no second
/// directory tree, no commit, no removal of the old tree).
struct RotationBenchmarks {
    let summary: Summary

    func run() throws {
        let simulator = try SoftwareTPM.start()
        defer { simulator.stop() }
        let root = try makeTemporaryDirectory("tpm-keychain-rotation-bench")
        defer { removeTree(root) }
        print("\n== Key rotation; swtpm \(simulator.tcti)")
        let clock = ContinuousClock()
        let value = Data(repeating: 0x42, count: 32)
        for items in [1000, 10_000] {
            let location = try KeychainLocation(path: root + "/rotate-\(items)", tcti: simulator.tcti)
            defer { Keychain.closeStore(location) }
            let source = try Keychain(service: "items", location: location)
            for index in 0..<items { try source.set(value, forKey: "key-\(index)") }
            let target = try Keychain(service: "floor", location: location)
            let floor = try clock.measure {
                for key in try source.allKeys() {
                    guard let stored = try source.data(forKey: key) else { throw BenchmarkError("\(key) vanished") }
                    try target.set(stored, forKey: key)
                }
            }
            _ = try target.removeAll()
            let ours = try clock.measure {
                _ = try SynchronousWait.run { () async -> Result<KeyRotation, KeychainError> in
                    do throws(KeychainError) { return .success(try await location.rotateKeys()) } catch {
                        return .failure(error)
                    }
                }.get()
            }
            guard try source.allKeys().count == items else { throw BenchmarkError("items lost in the rotation") }
            summary.add(
                Figure(
                    name: "rotateKeys, \(items) items", ours: Samples([ours]),
                    floorName: "read and durably write the same items", floor: Samples([floor]), goal: nil))
        }
    }
}

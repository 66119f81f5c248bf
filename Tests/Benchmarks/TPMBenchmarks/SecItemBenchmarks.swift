import Foundation
import SecurityCompat
import TPMKeychain
import TPMKeychainTesting

/// The SecItem layer's cost next to the `Keychain` API over the same store: one get,
/// one durable add + delete, and calls per second of 8 queues doing mixed calls, each pair timed
/// in alternating batches.
struct SecItemBenchmarks: @unchecked Sendable { // Summary is used from one thread at a time
    let summary: Summary
    let iterations: Int?
    /// Only the get pair: `TPMBenchmarks secitem-get N`, for profiling.
    var getsOnly = false

    func run() throws {
        let simulator = try SoftwareTPM.start()
        defer { simulator.stop() }
        let directory = try makeTemporaryDirectory("tpm-keychain-secitem-bench")
        defer { removeTree(directory) }
        var location = try KeychainLocation(path: directory + "/store", tcti: simulator.tcti)
        location.deviceDirectory = directory + "/device"
        defer { Keychain.closeStore(location) }
        KeychainEnvironment.location = location
        KeychainEnvironment.accessGroups = ["bench.group"]
        defer { KeychainEnvironment.reset() }
        print("\n== SecItem layer against the Keychain API, same store; swtpm \(simulator.tcti)")

        let keychain = try Keychain(service: "bench.secitem", accessGroup: "bench.group", location: location)
        let value = Data(repeating: 0x42, count: 32)
        try keychain.set(value, forKey: "get")
        let query: [String: Any] = [
            kSecClass as String: kSecClassGenericPassword, kSecAttrService as String: "bench.secitem",
            kSecAttrAccount as String: "get", kSecReturnData as String: true,
        ]
        let count = iterations ?? 2000
        let (ours, floor) = try measurePair(
            count, warmup: 20,
            {
                var result: AnyObject?
                guard SecItemCopyMatching(query as CFDictionary, &result) == errSecSuccess,
                    (result as? Data)?.count == 32
                else {
                    throw BenchmarkError("SecItemCopyMatching failed")
                }
            },
            {
                guard try keychain.data(forKey: "get")?.count == 32 else {
                    throw BenchmarkError("Keychain.data failed")
                }
            })
        summary.add(
            Figure(
                name: "SecItemCopyMatching, kSecReturnData, 32 B", ours: ours, floorName: "Keychain.data(forKey:)",
                floor: floor, goal: nil))
        if getsOnly { return }

        var counter = 0
        let writes = max(count / 10, 50)
        let (addDelete, setRemove) = try measurePair(
            writes, warmup: 5,
            {
                counter += 1
                let item: [String: Any] = [
                    kSecClass as String: kSecClassGenericPassword, kSecAttrService as String: "bench.secitem",
                    kSecAttrAccount as String: "w\(counter)", kSecValueData as String: value,
                ]
                guard SecItemAdd(item as CFDictionary, nil) == errSecSuccess,
                    SecItemDelete(item as CFDictionary) == errSecSuccess
                else {
                    throw BenchmarkError("SecItemAdd/Delete failed")
                }
            },
            {
                counter += 1
                try keychain.set(value, forKey: "w\(counter)")
                guard try keychain.remove("w\(counter)") else { throw BenchmarkError("Keychain.remove failed") }
            })
        summary.add(
            Figure(
                name: "SecItemAdd + SecItemDelete (durable)", ours: addDelete, floorName: "Keychain.set + remove",
                floor: setRemove, goal: nil))

        // Throughput: 8 queues, mixed calls (add, get, update, delete), both APIs in alternating rounds.
        var secItemRates: [Double] = []
        var keychainRates: [Double] = []
        for round in 0..<4 {
            for useSecItem in (round % 2 == 0 ? [true, false] : [false, true]) {
                let rate = try mixedLoad(useSecItem: useSecItem, keychainLocation: location, round: round)
                if useSecItem { secItemRates.append(rate) } else { keychainRates.append(rate) }
            }
        }
        print(
            String(
                format:
                    "8 queues x 250 mixed calls: SecItem %.0f calls/s (rounds: %@), Keychain API %.0f calls/s (rounds: %@)",
                secItemRates.sorted()[secItemRates.count / 2],
                secItemRates.map { String(format: "%.0f", $0) }.joined(separator: ", "),
                keychainRates.sorted()[keychainRates.count / 2],
                keychainRates.map { String(format: "%.0f", $0) }.joined(separator: ", ")))
    }

    private func mixedLoad(useSecItem: Bool, keychainLocation: KeychainLocation, round: Int) throws -> Double {
        let group = DispatchGroup()
        let start = ContinuousClock.now
        for queue in 0..<8 {
            group.enter()
            DispatchQueue.global().async {
                defer { group.leave() }
                let service = "load.\(round).\(queue).\(useSecItem)"
                let keychain = try? Keychain(service: service, accessGroup: "bench.group", location: keychainLocation)
                for step in 0..<250 {
                    let account = "k\(step % 10)"
                    let data = Data(account.utf8)
                    let base: [String: Any] = [
                        kSecClass as String: kSecClassGenericPassword, kSecAttrService as String: service,
                        kSecAttrAccount as String: account,
                    ]
                    switch (step % 4, useSecItem) {
                    case (0, true):
                        SecItemAdd(base.merging([kSecValueData as String: data]) { $1 } as CFDictionary, nil)
                    case (1, true):
                        var result: AnyObject?
                        SecItemCopyMatching(
                            base.merging([kSecReturnData as String: true]) { $1 } as CFDictionary, &result)
                    case (2, true): SecItemUpdate(base as CFDictionary, [kSecValueData as String: data] as CFDictionary)
                    case (_, true): SecItemDelete(base as CFDictionary)
                    case (0, false): try? keychain?.add(data, forKey: account)
                    case (1, false): _ = try? keychain?.data(forKey: account)
                    case (2, false): try? keychain?.set(data, forKey: account)
                    default: _ = try? keychain?.remove(account)
                    }
                }
            }
        }
        group.wait()
        let elapsed = ContinuousClock.now - start
        return 2000 / elapsed.seconds
    }
}

import Foundation
import KeychainStorageCompat
import TPMKeychain
import TPMKeychainTesting

/// KeychainStorageCompat: gets and durable puts on a password-cipher store next to a
/// plain one (the scrypt key is derived once per Cipher, not per item), and changeCipher on 1,000
/// and 10,000 items next to the floor of the same reads, decryptions, encryptions and writes.
struct StorageBenchmarks {
    let summary: Summary
    let iterations: Int?

    func run() throws {
        let simulator = try SoftwareTPM.start()
        defer { simulator.stop() }
        setenv("TPM_KEYCHAIN_TCTI", simulator.tcti, 1)
        defer { unsetenv("TPM_KEYCHAIN_TCTI") }
        let root = try makeTemporaryDirectory("tpm-keychain-storage-bench")
        defer { removeTree(root) }
        KeychainStorage.rootDirectory = root
        print("\n== KeychainStorage; swtpm \(simulator.tcti)")

        let clock = ContinuousClock()
        var derivations: [Duration] = []
        for _ in 0..<5 {
            derivations.append(clock.measure { _ = try? Cipher(password: "benchmark password", salt: "salt") })
        }
        summary.add(
            Figure(
                name: "Cipher(password:salt:), scrypt N=2^15 r=8 p=1 (once per open)", ours: Samples(derivations),
                floorName: nil, floor: nil, goal: nil))

        let cipher = try Cipher(password: "benchmark password", salt: "salt")
        let ciphered = try KeychainStorage.createStore(name: "ciphered", cipher: cipher)
        let plain = try KeychainStorage.createStore(name: "plain")
        let value = Data(repeating: 0x42, count: 32)
        try ciphered.put(data: value, for: "get")
        try plain.put(data: value, for: "get")
        let count = iterations ?? 2000
        let (cipheredGet, plainGet) = try measurePair(
            count, warmup: 20,
            {
                guard try ciphered.data(for: "get") == value else { throw BenchmarkError("ciphered get failed") }
            },
            {
                guard try plain.data(for: "get") == value else { throw BenchmarkError("plain get failed") }
            })
        summary.add(
            Figure(
                name: "KeychainStorage get, 32 B, with a Cipher", ours: cipheredGet,
                floorName: "the same store without one", floor: plainGet, goal: nil))
        let (cipheredPut, plainPut) = try measurePair(
            max(count / 10, 50), warmup: 5,
            {
                try ciphered.put(data: value, for: "put")
            },
            {
                try plain.put(data: value, for: "put")
            })
        summary.add(
            Figure(
                name: "KeychainStorage durable put, 32 B, with a Cipher", ours: cipheredPut, floorName: "without one",
                floor: plainPut, goal: nil))

        for items in [1000, 10_000] {
            let store = try KeychainStorage.createStore(name: "change-\(items)", cipher: cipher)
            for index in 0..<items { try store.put(data: value, for: "key-\(index)") }
            let next = try Cipher(password: "next password", salt: "salt")
            // The floor: the same reads, decryptions, encryptions and durable writes, into another
            // service, with nothing around them (no lock, no generation switch, no removal).
            let location = try KeychainLocation(path: root + "/private/change-\(items)", tpm: .automaticOrSimulated)
            let source = try Keychain(service: "KeychainStorage.g1", location: location)
            let target = try Keychain(service: "floor", location: location)
            let floor = try clock.measure {
                for key in try source.allKeys() {
                    guard let stored = try source.data(forKey: key) else { continue }
                    try target.set(try next.encrypt(try cipher.decrypt(stored)), forKey: key)
                }
            }
            _ = try target.removeAll()
            let ours = try clock.measure { try store.changeCipher(to: next) }
            summary.add(
                Figure(
                    name: "changeCipher, \(items) items", ours: Samples([ours]),
                    floorName: "read, decrypt, encrypt, write the same items",
                    floor: Samples([floor]), goal: nil))
        }
    }
}

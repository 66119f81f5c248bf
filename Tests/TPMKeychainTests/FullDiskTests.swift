import Foundation
import TPMKeychain
import TPMKeychainTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A store on a full file system (a small tmpfs, which needs root to mount).
@Suite struct FullDiskTests {
    @Test(
        "on a full disk a write fails with the cause named, every stored item stays intact, and no temp file outlives the next write",
        .enabled(if: getuid() == 0, "mounting a small tmpfs needs root"))
    func fullDisk() throws {
        let store = try TestStore()
        let mountPoint = store.directory + "/small"
        try FileManager.default.createDirectory(atPath: mountPoint, withIntermediateDirectories: true)
        try run("/bin/mount", ["-t", "tmpfs", "-o", "size=384k,mode=0700", "tmpfs", mountPoint])
        defer { try? run("/bin/umount", ["-l", mountPoint]) }
        var location = try KeychainLocation(path: mountPoint + "/store", tcti: store.simulator.tcti)
        location.deviceDirectory = store.directory + "/device"
        defer { Keychain.closeStore(location) }
        let keychain = try Keychain(service: "com.example.full", location: location)

        var stored: [String: Data] = [:]
        var failure: KeychainError?
        var index = 0
        while failure == nil && index < 1000 {
            let value = Data((0..<4096).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ index) })
            failure = attempt { () throws(KeychainError) in try keychain.set(value, forKey: "item-\(index)") }
            if failure == nil { stored["item-\(index)"] = value }
            index += 1
        }
        let error = try #require(failure, "the file system never filled up")
        #expect(error.code == .storageFailed, "\(error)")
        #expect("\(error)".lowercased().contains("space"), "the cause is not named: \(error)")
        #expect(stored.count > 10)

        // Replacing an existing item on the full disk fails and keeps the old value.
        let (firstKey, firstValue) = try #require(stored.first)
        #expect(throws: KeychainError.self) { try keychain.set(Data(repeating: 7, count: 8192), forKey: firstKey) }
        #expect(try keychain.data(forKey: firstKey) == firstValue)

        // Every acknowledged item reads back, also after the store is opened again.
        Keychain.closeStore(location)
        for (key, value) in stored { #expect(try keychain.data(forKey: key) == value, "\(key)") }

        // With room again, the next write succeeds and leaves no temp file behind.
        let victims = Array(stored.keys.prefix(8))
        for key in victims { #expect(try keychain.remove(key)) }
        try keychain.set(Data("fits now".utf8), forKey: firstKey)
        #expect(try keychain.string(forKey: firstKey) == "fits now")
        let leftovers =
            FileManager.default.enumerator(atPath: mountPoint)?.compactMap { $0 as? String }.filter {
                $0.hasSuffix(".tmp")
            } ?? []
        #expect(leftovers.isEmpty, "temp files left: \(leftovers)")
    }

    /// The error `body` throws, or nil.
    private func attempt(_ body: () throws(KeychainError) -> Void) -> KeychainError? {
        do {
            try body()
            return nil
        } catch {
            return error
        }
    }

    private func run(_ executable: String, _ arguments: [String]) throws {
        try SystemTool.run(executable, arguments)
    }
}

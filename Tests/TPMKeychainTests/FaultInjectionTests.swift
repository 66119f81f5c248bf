import Foundation
import TPMKeychain
import Testing

@testable import KeychainStore

#if canImport(Glibc)
import Glibc
#endif

/// ENOSPC and EIO at every step of a write, through the store's fault-injection seam
/// (``FaultInjection``), on a real store and swtpm. The seam is process-wide: each fault names
/// its test's own store directory, so that suites running alongside never meet it, and the suite
/// is serialized and disarms it after each test.
@Suite(.serialized) struct FaultInjectionTests {
    static let causes: [(errno: Int32, words: String)] = [(ENOSPC, "disk is full"), (EIO, "I/O error")]

    @Test(
        "ENOSPC and EIO at each write step: a clear error naming the cause, the old value readable, no temp file left, and the next write works",
        arguments: FaultInjection.Step.allCases)
    func writeStepFails(_ step: FaultInjection.Step) throws {
        let store = try TestStore()
        let keychain = try store.keychain()
        defer { FaultInjection.disarm() }
        for (index, cause) in Self.causes.enumerated() {
            let key = "key-\(index)"
            try keychain.set("old", forKey: key)
            FaultInjection.arm(step, errno: cause.errno, pathContaining: store.location.path + "/items2")
            do {
                try keychain.set("new", forKey: key)
                Issue.record("a write whose \(step) failed with errno \(cause.errno) reported success")
            } catch {
                #expect(error.code == .storageFailed, "\(error)")
                #expect(error.message.contains(cause.words), "the cause is not named: \(error)")
                #expect("\(error)".contains(String(cString: strerror(cause.errno))), "\(error)")
            }
            FaultInjection.disarm()
            // Before the rename the old file is untouched; the rename itself is atomic, so a
            // failure of the directory's fsync after it leaves the new value (not yet durable).
            let expected = step == .syncDirectory ? "new" : "old"
            #expect(try keychain.string(forKey: key) == expected, "\(step), errno \(cause.errno)")
            #expect(try store.files().filter { $0.hasSuffix(".tmp") }.isEmpty, "\(step): temp files left behind")
            try keychain.set("newer", forKey: key)
            #expect(try keychain.string(forKey: key) == "newer")
            #expect(try store.files().filter { $0.hasSuffix(".tmp") }.isEmpty)
        }
        // The others were never touched.
        Keychain.closeStore(store.location)
        #expect(try store.keychain().allKeys().sorted() == ["key-0", "key-1"])
    }

    @Test(
        "a key rotation whose commit (store.meta) fails leaves the old key in charge and every item readable; the next rotation works",
        arguments: [FaultInjection.Step.write, .rename])
    func rotationCommitFails(_ step: FaultInjection.Step) async throws {
        let store = try TestStore()
        let keychain = try store.keychain()
        defer { FaultInjection.disarm() }
        for index in 0..<20 { try keychain.set("value-\(index)", forKey: "key-\(index)") }
        let metadata = try bytes(of: store.location.path + "/store.meta")
        FaultInjection.arm(step, errno: EIO, pathContaining: store.location.path + "/store.meta")
        await expectAsyncKeychainError(.storageFailed) { try await store.location.rotateKeys() }
        FaultInjection.disarm()
        #expect(try bytes(of: store.location.path + "/store.meta") == metadata)
        // The copy was removed at once, not left for the next open.
        let left = try FileManager.default.contentsOfDirectory(atPath: store.location.path).filter {
            $0.hasPrefix("items2")
        }
        #expect(left == ["items2"], "\(left)")
        for index in 0..<20 { #expect(try keychain.string(forKey: "key-\(index)") == "value-\(index)") }
        Keychain.closeStore(store.location)
        let reopened = try store.keychain()
        for index in 0..<20 { #expect(try reopened.string(forKey: "key-\(index)") == "value-\(index)") }
        // The uncommitted copy was removed when the store was opened again.
        let entries = try FileManager.default.contentsOfDirectory(atPath: store.location.path).filter {
            $0.hasPrefix("items2")
        }
        #expect(entries == ["items2"], "\(entries)")
        try await store.location.rotateKeys()
        #expect(try reopened.string(forKey: "key-7") == "value-7")
    }

    @Test(
        "a rotation whose store.meta was renamed but whose directory fsync failed is committed: the error is reported, nothing is removed, and every item reads under the new key"
    )
    func rotationCommitNotDurable() async throws {
        let store = try TestStore()
        let keychain = try store.keychain()
        defer { FaultInjection.disarm() }
        for index in 0..<20 { try keychain.set("value-\(index)", forKey: "key-\(index)") }
        let metadata = try bytes(of: store.location.path + "/store.meta")
        FaultInjection.arm(.syncDirectory, errno: EIO, pathContaining: store.location.path + "/store.meta")
        await expectAsyncKeychainError(.storageFailed) { try await store.location.rotateKeys() }
        FaultInjection.disarm()
        #expect(try bytes(of: store.location.path + "/store.meta") != metadata, "the rename happened")
        // This process still reads (the old files are there until a writer or an open follows) ...
        for index in 0..<20 { #expect(try keychain.string(forKey: "key-\(index)") == "value-\(index)") }
        // ... a write follows the new key ...
        try keychain.set("after", forKey: "key-0")
        // ... and a fresh open finds everything under it.
        Keychain.closeStore(store.location)
        let reopened = try store.keychain()
        for index in 1..<20 { #expect(try reopened.string(forKey: "key-\(index)") == "value-\(index)") }
        #expect(try reopened.string(forKey: "key-0") == "after")
        let left = try FileManager.default.contentsOfDirectory(atPath: store.location.path).filter {
            $0.hasPrefix("items2")
        }
        #expect(left.count == 1 && left[0].hasPrefix("items2-"), "\(left)")
    }

    @Test("a fault in the middle of a rotation's copy (ENOSPC on the 50th item) commits nothing and loses nothing")
    func rotationCopyFails() async throws {
        let store = try TestStore()
        let keychain = try store.keychain()
        defer { FaultInjection.disarm() }
        for index in 0..<100 { try keychain.set("value-\(index)", forKey: "key-\(index)") }
        // The 50th item file the rotation writes fails; the 49 before it succeed.
        FaultInjection.arm(
            .syncFile, errno: ENOSPC, pathContaining: store.location.path + "/items2", times: 1, skipping: 49)
        await expectAsyncKeychainError(.storageFailed) { try await store.location.rotateKeys() }
        FaultInjection.disarm()
        for index in 0..<100 { #expect(try keychain.string(forKey: "key-\(index)") == "value-\(index)") }
        Keychain.closeStore(store.location)
        #expect(try store.keychain().allKeys().count == 100)
    }
}

import Foundation
import StressProcess
import TPM
import TPMKeychain
import TPMKeychainTesting
import Testing

@testable import KeychainStore

#if canImport(Glibc)
import Glibc
#endif

/// Rotating a store's master key (docs/FORMAT.md, "Key rotation"), on a real swtpm.
@Suite struct KeyRotationTests {
    static let passcode = SecretBytes(copying: Array("rotation passcode 1".utf8))

    /// The entries of the store directory that hold a key generation's items or records.
    static func generations(_ store: TestStore) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: store.location.path)
            .filter { $0.hasPrefix("items2") || $0.hasPrefix("records") }.sorted()
    }

    @Test(
        "a rotation keeps every item (plain, in an access group, protected) and replaces the sealed key, every file and every name"
    )
    func rotationKeepsItems() async throws {
        let store = try TestStore()
        try KeychainDevice(location: store.location).setPasscode(Self.passcode)
        let keychain = try store.keychain()
        let grouped = try store.keychain("com.example.shared", accessGroup: "group.example")
        try keychain.set("alpha value", forKey: "alpha", label: "Alpha")
        try keychain.set(Data([0, 1, 2, 255]), forKey: "binary")
        try grouped.set("in a group", forKey: "member")
        try await keychain.set(
            "behind the passcode", forKey: "pin",
            accessControl: try AccessControl(.whenUnlocked, flags: .devicePasscode))
        let filesBefore = try store.itemFiles()
        let metadataPath = store.location.path + "/store.meta"
        let metadataBefore = try bytes(of: metadataPath)
        #expect(filesBefore.count == 4)

        // A protected item can only be re-encrypted by someone who can read it: without a
        // context, nothing is changed.
        await expectAsyncKeychainError(.interactionNotAllowed) { try await store.location.rotateKeys() }
        #expect(try store.itemFiles() == filesBefore)
        #expect(try bytes(of: metadataPath) == metadataBefore)

        let context = AuthenticationContext(passcode: .fixed(Self.passcode), location: store.location)
        let rotation = try await store.location.rotateKeys(context: context)
        #expect(rotation.items == 4 && rotation.keyRecords == 1, "\(rotation)")
        let filesAfter = try store.itemFiles()
        #expect(filesAfter.count == 4)
        #expect(
            Set(filesAfter.map { ($0 as NSString).lastPathComponent }).isDisjoint(
                with: filesBefore.map { ($0 as NSString).lastPathComponent }))
        let metadataAfter = try bytes(of: metadataPath)
        #expect(metadataAfter != metadataBefore)
        #expect(Array(metadataAfter[8..<24]) == Array(metadataBefore[8..<24]), "the store ID is kept")
        // One generation's directories, the new key's.
        let generations = try Self.generations(store)
        #expect(generations.count == 2 && generations.allSatisfy { $0.contains("-") }, "\(generations)")

        func expectEverything(_ keychain: Keychain, _ grouped: Keychain) async throws {
            #expect(try keychain.string(forKey: "alpha") == "alpha value")
            #expect(try keychain.data(forKey: "binary") == Data([0, 1, 2, 255]))
            #expect(try keychain.attributes(forKey: "alpha")?.label == "Alpha")
            #expect(try grouped.string(forKey: "member") == "in a group")
            let reader = AuthenticationContext(passcode: .fixed(Self.passcode), location: store.location)
            #expect(try await keychain.get("pin", as: String.self, context: reader) == "behind the passcode")
            #expect(try keychain.allKeys().sorted() == ["alpha", "binary", "pin"])
        }
        // The rotating handle carries on; a fresh open unseals the new key.
        try await expectEverything(keychain, grouped)
        Keychain.closeStore(store.location)
        try await expectEverything(
            try store.keychain(), try store.keychain("com.example.shared", accessGroup: "group.example"))

        // The old store.meta put back (a partial restore) names a key whose files are gone: an
        // error that says so, not an empty store.
        Keychain.closeStore(store.location)
        try Data(metadataBefore).write(to: URL(fileURLWithPath: metadataPath))
        expectKeychainError(.tampered) { _ = try store.keychain().string(forKey: "alpha") }
        try Data(metadataAfter).write(to: URL(fileURLWithPath: metadataPath))
        Keychain.closeStore(store.location)
        #expect(try store.keychain().string(forKey: "alpha") == "alpha value")
    }

    @Test(
        "a store open in this process follows a rotation made by another process: reads, writes and listings use the new key",
        .tags(.concurrency))
    func otherProcessRotation() throws {
        let store = try TestStore()
        let keychain = try store.keychain()
        for index in 0..<20 { try keychain.set("value-\(index)", forKey: "key-\(index)") }
        #expect(try keychain.string(forKey: "key-3") == "value-3") // open, caches warm
        let rotator = try Self.runRotation(store)
        _ = rotator.finish()
        #expect(rotator.process.terminationStatus == 0)
        // The directories this process had open are gone; it notices, unseals the new key, reads on.
        #expect(try keychain.string(forKey: "key-3") == "value-3")
        #expect(try keychain.string(forKey: "key-17") == "value-17")
        #expect(try keychain.allKeys().count == 20)
        try keychain.set("changed", forKey: "key-5")
        #expect(try keychain.string(forKey: "missing") == nil)
        Keychain.closeStore(store.location)
        let reopened = try store.keychain()
        #expect(try reopened.string(forKey: "key-5") == "changed")
        #expect(try reopened.allKeys().count == 20)
        #expect(try Self.generations(store).count == 2)
    }

    @Test(
        "rotations while another process keeps writing: every acknowledged write is there afterwards, with its latest value"
    )
    func rotationsDuringWrites() async throws {
        let store = try TestStore()
        let keychain = try store.keychain("com.example.busy")
        try keychain.set("seed", forKey: "seed") // the store exists before the writer opens it
        let accounts = (0..<8).map { "account-\($0)" }
        // The writer writes until told to stop, so that it is writing during all three rotations
        // however fast they are (a fixed number of writes could end first on a slow machine).
        let stop = store.directory + "/stop-writing"
        let writer = try WriterProcess(store: store, service: "com.example.busy", accounts: accounts, until: stop)
        writer.waitFor("wrote")
        // Three rotations while the writer runs: each waits for the writer's current write (the
        // store lock), and the writer follows each new key (store.meta's inode) before its next one.
        for _ in 0..<3 { try await store.location.rotateKeys() }
        #expect(writer.process.isRunning, "the writer ended during the rotations")
        // Writes go round the accounts in order: once the last has been written, every one has a value.
        writer.waitFor("wrote \(accounts[accounts.count - 1]) ")
        #expect(FileManager.default.createFile(atPath: stop, contents: nil))
        writer.process.waitUntilExit()
        #expect(writer.process.terminationStatus == 0)
        let acknowledged = writer.acknowledged()
        let count = try #require(writer.stoppedAfter())
        #expect(count > 0)
        #expect(acknowledged.values.reduce(0) { $0 + $1.count } == count)
        Keychain.closeStore(store.location)
        let reader = try store.keychain("com.example.busy")
        for account in accounts {
            let value = try #require(try reader.data(forKey: account), "\(account)")
            #expect(sequence(in: value, account: account, size: 64) == acknowledged[account]?.max(), "\(account)")
        }
        #expect(try reader.allKeys().count == accounts.count + 1)
        #expect(try Self.generations(store).count == 2)
    }

    @Test(
        "killed at random points, a rotation leaves the old key and files or the new ones, never a mix: every item reads after each kill"
    )
    func killedRotations() throws {
        let store = try TestStore()
        let keychain = try store.keychain()
        let count = 300
        for index in 0..<count { try keychain.set("value-\(index)", forKey: "key-\(index)") }
        let recoveryKey = try store.location.addRecoveryKey()
        Keychain.closeStore(store.location)
        var unchanged = 0
        var rotated = 0
        let metadataPath = store.location.path + "/store.meta"
        for round in 0...30 {
            let before = try bytes(of: metadataPath)
            // Round 0 runs to the end; the others are killed where KillPoint says, on both sides of the commit.
            let killPoint = round == 0 ? nil : KillPoint.forRound(round, items: count)
            let process = try Self.runRotation(store, arguments: killPoint?.arguments ?? [])
            if let killPoint, process.waitFor(killPoint.line) { process.kill() }
            _ = process.finish()
            if killPoint == nil { #expect(process.process.terminationStatus == 0) }
            if try bytes(of: metadataPath) == before { unchanged += 1 } else { rotated += 1 }
            // Opening cleans up what the killed rotation left, whichever side of its commit it died on.
            Keychain.closeStore(store.location)
            let reader = try store.keychain()
            #expect(try reader.allKeys().count == count, "round \(round)")
            for index in stride(from: round % 7, to: count, by: 7) {
                #expect(try reader.string(forKey: "key-\(index)") == "value-\(index)", "round \(round), key-\(index)")
            }
            let generations = try Self.generations(store)
            #expect(generations.count == 2, "round \(round): \(generations)")
            #expect(try store.files().allSatisfy { !$0.hasSuffix(".tmp") || $0.contains("/items2") }, "round \(round)")
            Keychain.closeStore(store.location)
        }
        // Whichever side of a commit each kill fell on, the recovery key opens the current master key.
        let recovery = try store.location.recover(with: recoveryKey)
        #expect(recovery.itemsKept == count && recovery.itemsRemoved == 0, "\(recovery)")
        print("key rotations of \(count) items: \(unchanged) killed before the commit, \(rotated) committed")
        #expect(unchanged > 0 && rotated > 1)
    }

    /// Runs `tpm-keychain-stress --rotate-keys` on the store, with `arguments` added.
    static func runRotation(_ store: TestStore, arguments: [String] = []) throws -> StressProcess {
        try StressProcess(
            ["--keychain", store.location.path, "--tcti", store.simulator.tcti, "--rotate-keys"] + arguments)
    }
}

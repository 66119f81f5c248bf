import Foundation
import TPM
import TPMKeychain
import TPMKeychainTesting
import Testing

@testable import KeychainStore

/// Rollback and deletion detection: the manifest, its chain of MACs and the TPM counter its
/// epochs are bound to (docs/SECURITY.md, "Rollback and deletion").
@Suite(.tags(.concurrency)) struct RollbackTests {
    /// A copy of the store directory as it is now.
    private func backup(_ store: TestStore, as name: String) throws -> String {
        let copy = store.directory + "/" + name
        try FileManager.default.copyItem(atPath: store.location.path, toPath: copy)
        return copy
    }

    /// Puts `source` where `target` is, keeping what was there aside (outside the store).
    private func replace(_ target: String, with source: String) throws {
        try FileManager.default.moveItem(atPath: target, toPath: aside(target))
        try FileManager.default.copyItem(atPath: source, toPath: target)
    }

    private func putBack(_ target: String) throws {
        try FileManager.default.removeItem(atPath: target)
        try FileManager.default.moveItem(atPath: aside(target), toPath: target)
    }

    private func aside(_ path: String) -> String {
        NSTemporaryDirectory() + "rollback-aside-" + String(UInt64(bitPattern: Int64(path.hashValue)), radix: 16)
    }

    /// A new store holding one item, with its handle closed: the next open is a handle of its own.
    private func storeWithOneItem() throws -> TestStore {
        let store = try TestStore()
        try store.keychain().set("first", forKey: "first")
        Keychain.closeStore(store.location)
        return store
    }

    private func openStore(_ store: TestStore) throws -> ItemStore {
        try ItemStore.open(at: store.location.path, tpm: TPMConfiguration(tcti: store.simulator.tcti), create: false)
    }

    @Test(
        "an older copy of one item, of its service's directory or of the whole store is reported as rolledBack; nothing old is read, and putting the current files back heals it"
    )
    func olderCopiesAreReported() throws {
        let store = try TestStore()
        let keychain = try store.keychain()
        try keychain.set("old alice", forKey: "alice")
        try keychain.set("bob", forKey: "bob")
        try store.keychain("com.example.other").set("carol", forKey: "carol")
        Keychain.closeStore(store.location) // the next write is another handle: a new epoch
        let old = try backup(store, as: "old")
        try keychain.set("new alice", forKey: "alice")

        let changed = try store.itemFiles().filter {
            try bytes(of: $0) != bytes(of: old + $0.dropFirst(store.location.path.count))
        }
        let alice = try #require(changed.first)
        #expect(changed.count == 1)
        let oldAlice = old + alice.dropFirst(store.location.path.count)

        // One item file.
        try replace(alice, with: oldAlice)
        expectKeychainError(.rolledBack) { _ = try keychain.string(forKey: "alice") }
        expectKeychainError(.rolledBack) { _ = try keychain.allItems() }
        expectKeychainError(.rolledBack) { _ = try keychain.attributes(forKey: "alice") }
        expectKeychainError(.rolledBack) {
            try keychain.set("blind overwrite keeps no old attributes", forKey: "alice", label: "x")
        }
        #expect(try keychain.string(forKey: "bob") == "bob", "other items read on")
        try putBack(alice)
        #expect(try keychain.string(forKey: "alice") == "new alice")

        // The service's whole directory (with its lock file), while no handle has it open.
        Keychain.closeStore(store.location)
        let directory = (alice as NSString).deletingLastPathComponent
        try replace(directory, with: old + directory.dropFirst(store.location.path.count))
        expectKeychainError(.rolledBack) { _ = try keychain.string(forKey: "alice") }
        expectKeychainError(.rolledBack) { _ = try Keychain.allItems(in: store.location) }
        try putBack(directory)
        #expect(try keychain.string(forKey: "alice") == "new alice")

        // The whole store: its manifest is from an epoch the TPM counter has left behind.
        Keychain.closeStore(store.location)
        try replace(store.location.path, with: old)
        do {
            _ = try keychain.string(forKey: "bob")
            Issue.record("a store from an older epoch opened")
        } catch {
            #expect(error.code == .rolledBack, "\(error)")
            #expect(error.message.contains("older copy") && error.message.contains("recover"), "\(error.message)")
        }
        Keychain.closeStore(store.location)
        try putBack(store.location.path)
        #expect(try keychain.string(forKey: "alice") == "new alice")
        #expect(try store.keychain("com.example.other").string(forKey: "carol") == "carol")
    }

    @Test(
        "an item file deleted outside the keychain is reported by lookups and listings; deleting the item through the keychain accepts the loss; a deleted item put back is reported"
    )
    func deletionsAreReported() throws {
        let store = try TestStore()
        let keychain = try store.keychain()
        try keychain.set("a", forKey: "a")
        let fileA = try #require(try store.itemFiles().first)
        try keychain.set("b", forKey: "b")
        try FileManager.default.removeItem(atPath: fileA)
        expectKeychainError(.rolledBack) { _ = try keychain.string(forKey: "a") }
        expectKeychainError(.rolledBack) { _ = try keychain.allKeys() }
        expectKeychainError(.rolledBack) { _ = try keychain.contains("a") }
        #expect(try keychain.remove("a") == false, "the file was already gone")
        #expect(try keychain.string(forKey: "a") == nil)
        #expect(try keychain.allKeys() == ["b"])

        // A deleted item's file put back (from a backup): never read again.
        try keychain.set("c", forKey: "c")
        let before = Set(try store.itemFiles())
        try keychain.set("d", forKey: "d")
        let fileD = try #require(Set(try store.itemFiles()).subtracting(before).first)
        let copyD = try bytes(of: fileD)
        #expect(try keychain.remove("d"))
        #expect(!FileManager.default.fileExists(atPath: fileD))
        #expect(
            FileManager.default.createFile(atPath: fileD, contents: Data(copyD), attributes: [.posixPermissions: 0o600])
        )
        expectKeychainError(.rolledBack) { _ = try keychain.string(forKey: "d") }
        expectKeychainError(.rolledBack) { _ = try keychain.allKeys() }
        #expect(try keychain.remove("d"))
        try keychain.set("d again", forKey: "d")
        #expect(try keychain.string(forKey: "d") == "d again")
        #expect(Set(try keychain.allKeys()) == ["b", "c", "d"])

        // removeAll records every delete: one of its files put back is reported too.
        let survivor = try #require(try store.itemFiles().first)
        let copy = try bytes(of: survivor)
        #expect(try keychain.removeAll() == 3)
        #expect(try keychain.allKeys().isEmpty)
        #expect(
            FileManager.default.createFile(
                atPath: survivor, contents: Data(copy), attributes: [.posixPermissions: 0o600]))
        expectKeychainError(.rolledBack) { _ = try keychain.allKeys() }
    }

    @Test(
        "the counter moves once per epoch: a handle's first write, not every write; the manifest's epoch is the counter's value; a fresh store is protected by default"
    )
    func counterMovesOncePerEpoch() throws {
        let store = try storeWithOneItem()
        let opened = try openStore(store)
        defer { opened.close() }
        #expect(opened.isRollbackProtected)
        let index = try #require(opened.rollbackCounterIndex)
        let start = try #require(try opened.rollbackCounterValue())
        #expect(opened.manifestEpoch == start)
        for number in 0..<100 {
            try opened.write(
                try ItemIdentity(accessGroup: "", service: "s", account: "a\(number)"), mode: .upsert,
                value: value("v\(number)"),
                changes: AttributeChanges())
        }
        #expect(try opened.rollbackCounterValue() == start + 1, "100 writes, one epoch")
        #expect(opened.manifestEpoch == start + 1)
        _ = try opened.delete(try ItemIdentity(accessGroup: "", service: "s", account: "a0"))
        #expect(try opened.rollbackCounterValue() == start + 1)

        // The index is the TPM's: a NO_DA counter nobody without the master key can move.
        let attributes = try #require(
            try TPMConnection(TPMConfiguration(tcti: store.simulator.tcti)).nvIndexAttributes(index))
        #expect(attributes & 0x0200_0000 != 0, "NO_DA")
        #expect(attributes & 0xF0 == 0x10, "a counter")
        expectThrows { try TPMConnection(TPMConfiguration(tcti: store.simulator.tcti)).incrementNVCounter(index) }

        let second = try openStore(store)
        defer { second.close() }
        #expect(
            try second.value(try ItemIdentity(accessGroup: "", service: "s", account: "a99"))?.bytes
                == Array("v99".utf8))
        #expect(try second.rollbackCounterValue() == start + 1, "reads start no epoch")
        try second.write(
            try ItemIdentity(accessGroup: "", service: "s", account: "b"), mode: .add, value: value("b"),
            changes: AttributeChanges())
        #expect(try second.rollbackCounterValue() == start + 2)
        // The first handle follows the second's records and reads its write.
        #expect(
            try opened.value(try ItemIdentity(accessGroup: "", service: "s", account: "b"))?.bytes == Array("b".utf8))
    }

    /// The manifest's size, and the manifest cut back to `size` bytes: what a writer killed
    /// after its rename and before its record leaves (its records are appended without fsync).
    private func manifestSize(_ store: TestStore) throws -> Int {
        try bytes(of: store.location.path + "/manifest").count
    }

    private func cutManifest(_ store: TestStore, to size: Int) {
        #expect(truncate(store.location.path + "/manifest", off_t(size)) == 0)
    }

    @Test(
        "an upsert of an item the manifest lists appends one record; its writer killed before that record leaves the new version read by every handle, and the old one put back is still rolledBack"
    )
    func upsertOfAListedItemAppendsOneRecord() throws {
        let store = try storeWithOneItem()
        let writer = try openStore(store)
        let alice = try ItemIdentity(accessGroup: "", service: "s", account: "alice")
        let others = Set(try store.itemFiles())
        try writer.write(alice, mode: .add, value: value("one"), changes: AttributeChanges())
        let file = try #require(try store.itemFiles().first { !others.contains($0) })
        let versionOne = try bytes(of: file)
        let before = try manifestSize(store)
        try writer.write(alice, mode: .upsert, value: value("two"), changes: AttributeChanges())
        #expect(try manifestSize(store) == before + 64, "one \"S\", no \"W\"")
        writer.close()

        cutManifest(store, to: before)
        let next = try openStore(store)
        defer { next.close() }
        #expect(try next.value(alice)?.bytes == Array("two".utf8))
        // Another item first: this handle's first write also starts its epoch (an "E" record).
        try next.write(
            try ItemIdentity(accessGroup: "", service: "s", account: "bob"), mode: .add, value: value("b"),
            changes: AttributeChanges())
        let beforeThree = try manifestSize(store)
        // The next write of alice records the version the manifest missed, then its own.
        try next.write(alice, mode: .upsert, value: value("three"), changes: AttributeChanges())
        #expect(try manifestSize(store) == beforeThree + 128)
        let reader = try openStore(store)
        #expect(try reader.value(alice)?.bytes == Array("three".utf8))
        reader.close()

        // Put back as a restore does: a new file (the store's mode) renamed over the current one.
        try Data(versionOne).write(to: URL(fileURLWithPath: file + ".restored"))
        #expect(chmod(file + ".restored", 0o600) == 0 && rename(file + ".restored", file) == 0)
        let late = try openStore(store)
        defer { late.close() }
        expectKeychainError(.rolledBack) { _ = try late.value(alice) }
    }

    @Test(
        "a new item's write still announces itself: its record lost, new items written after it do not make it read as deleted"
    )
    func newItemsStillAnnounceTheirWrite() throws {
        let store = try storeWithOneItem()
        let writer = try openStore(store)
        try writer.write(
            try ItemIdentity(accessGroup: "", service: "s", account: "before"), mode: .add, value: value("b"),
            changes: AttributeChanges())
        let carol = try ItemIdentity(accessGroup: "", service: "s", account: "carol")
        let before = try manifestSize(store)
        try writer.write(carol, mode: .add, value: value("c"), changes: AttributeChanges())
        #expect(try manifestSize(store) == before + 128, "\"W\" before the rename, \"S\" after it")
        writer.close()

        cutManifest(store, to: try manifestSize(store) - 64) // its "S"
        let next = try openStore(store)
        defer { next.close() }
        for number in 0..<3 {
            try next.write(
                try ItemIdentity(accessGroup: "", service: "s", account: "after\(number)"), mode: .add,
                value: value("a"), changes: AttributeChanges())
        }
        #expect(try next.value(carol)?.bytes == Array("c".utf8))
        let reader = try openStore(store)
        defer { reader.close() }
        #expect(try reader.value(carol)?.bytes == Array("c".utf8))
    }

    @Test("the manifest modified is tampered; missing is rolledBack; both name the file")
    func manifestDamage() throws {
        let store = try TestStore()
        try store.keychain().set("v", forKey: "k")
        Keychain.closeStore(store.location)
        let manifest = store.location.path + "/manifest"
        let original = try bytes(of: manifest)
        // Header, the creation's epoch, the first write's epoch, the item's "writing" and "written".
        #expect(original.count == 5 * 64)
        var flipped = original
        flipped[4 * 64 + 20] ^= 0x01 // inside the item's "written" record
        try overwrite(manifest, with: flipped)
        // A record that fails its MAC ends the chain: the item it recorded is then newer than the
        // manifest says, and accepted (it is genuine).
        #expect(try store.keychain().string(forKey: "k") == "v")
        Keychain.closeStore(store.location)
        // Cut before the latest epoch record: older than the counter.
        flipped = original
        flipped[2 * 64 + 20] ^= 0x01 // inside the first write's epoch record
        try overwrite(manifest, with: flipped)
        expectKeychainError(.rolledBack) { _ = try store.keychain().string(forKey: "k") }
        Keychain.closeStore(store.location)
        // The header failing is tampering.
        var header = original
        header[20] ^= 0x01
        try overwrite(manifest, with: header)
        expectKeychainError(.tampered) { _ = try store.keychain().string(forKey: "k") }
        Keychain.closeStore(store.location)
        try FileManager.default.removeItem(atPath: manifest)
        let reopened = try store.keychain()
        do {
            _ = try reopened.string(forKey: "k")
            Issue.record("a protected store opened without its manifest")
        } catch {
            #expect(error.code == .rolledBack && error.message.contains("manifest"), "\(error)")
        }
        Keychain.closeStore(store.location)
        #expect(
            FileManager.default.createFile(
                atPath: manifest, contents: Data(original), attributes: [.posixPermissions: 0o600]))
        #expect(try store.keychain().string(forKey: "k") == "v")
    }

    @Test(
        "a manifest grown past any writer's size (a sparse file meant to exhaust memory) is refused unread as tampered; the file put back, the store opens"
    )
    func oversizedManifest() throws {
        let store = try TestStore()
        try store.keychain().set("v", forKey: "k")
        Keychain.closeStore(store.location)
        let manifest = store.location.path + "/manifest"
        let original = try bytes(of: manifest)
        #expect(truncate(manifest, off_t(64 << 20) + 1) == 0) // 64 MiB + 1, sparse: no disk used
        let error = expectKeychainError(.tampered) { _ = try store.keychain().string(forKey: "k") }
        #expect(error?.message.contains("more than a manifest ever grows to") == true, "\(String(describing: error))")
        Keychain.closeStore(store.location)
        try overwrite(manifest, with: original)
        #expect(try store.keychain().string(forKey: "k") == "v")
    }

    @Test(
        "a FIFO planted where a file is rewritten in place (the manifest) makes the write fail as an unsafe file system, never block"
    )
    func fifoIsNeverOpenedForWriting() throws {
        let store = try TestStore()
        try store.keychain().set("v", forKey: "k")
        Keychain.closeStore(store.location)
        let directory = try #require(try Directory.open(store.location.path, in: nil, create: false, storeRoot: true))
        #expect(mkfifo(store.location.path + "/planted", 0o600) == 0)
        // With no reader a blocking open would wait forever; the write must be refused at once.
        do {
            try directory.overwrite("planted", at: 0, with: [1, 2, 3], durable: false)
            Issue.record("a FIFO was written to")
        } catch {
            #expect(error.code == .unsafeFileSystem, "\(error)")
        }
    }

    @Test(
        "a store without a recovery key whose counter someone undefined is not lost: acceptFilesAsTheyAre (for whoever the TPM unseals its key for) gives it a new counter; refused while the counter is there"
    )
    func missingCounterWithoutRecoveryKey() throws {
        let store = try TestStore()
        try store.keychain().set("kept", forKey: "k")
        try store.keychain().set("also kept", forKey: "k2")
        Keychain.closeStore(store.location)
        expectKeychainError(.invalidParameter) { _ = try store.location.acceptFilesAsTheyAre() }
        let index: UInt32
        do {
            let opened = try openStore(store)
            index = try #require(opened.rollbackCounterIndex)
            opened.close()
        }
        #expect(
            try TPM2Tools.run(
                ["tpm2_nvundefine", "0x" + String(index, radix: 16), "-C", "o"], tcti: store.simulator.tcti
            ).status == 0)
        let error = expectKeychainError(.rollbackCounterMissing) { _ = try store.keychain().string(forKey: "k") }
        #expect(error?.message.contains("accepting the rollback risk") == true, "\(String(describing: error))")
        Keychain.closeStore(store.location)
        #expect(try store.location.acceptFilesAsTheyAre() == 2)
        #expect(try store.keychain().string(forKey: "k") == "kept")
        #expect(try store.keychain().string(forKey: "k2") == "also kept")
        Keychain.closeStore(store.location)
        let reopened = try openStore(store)
        defer { reopened.close() }
        #expect(reopened.isRollbackProtected && reopened.rollbackCounterIndex != nil)
    }

    @Test(
        "a copy of a store from before it got its rollback counter is refused as rolled back once the counter exists (its handle derives from the store's keys)"
    )
    func preCounterSnapshotIsRolledBack() throws {
        let store = try TestStore()
        try FormatOneWriter.createStore(at: store.location.path, tcti: store.simulator.tcti)
        let configuration = TPMConfiguration(tcti: store.simulator.tcti)
        let identity = try ItemIdentity(accessGroup: "", service: "svc", account: "k")
        do {
            let opened = try ItemStore.open(at: store.location.path, tpm: configuration, create: false)
            defer { opened.close() }
            try FormatOneWriter.write("before", for: identity, label: nil, into: opened)
            #expect(!opened.isRollbackProtected)
        }
        let snapshot = try backup(store, as: "pre-counter")
        // The first write moves it to format 2; the next open gives it its counter.
        do {
            let opened = try ItemStore.open(at: store.location.path, tpm: configuration, create: false)
            defer { opened.close() }
            try opened.write(
                identity, mode: .update, value: ItemValue(kind: .string, bytes: Array("after".utf8)),
                changes: AttributeChanges())
        }
        do {
            let opened = try ItemStore.open(at: store.location.path, tpm: configuration, create: false)
            defer { opened.close() }
            #expect(opened.isRollbackProtected)
        }
        try FileManager.default.removeItem(atPath: store.location.path)
        try FileManager.default.copyItem(atPath: snapshot, toPath: store.location.path)
        expectKeychainError(.rolledBack) {
            _ = try ItemStore.open(at: store.location.path, tpm: configuration, create: false)
        }
    }

    @Test(
        "the counter deleted from the TPM is rollbackCounterMissing naming recover; the recovery key accepts the files and makes a new counter"
    )
    func missingCounterAndRecovery() throws {
        let store = try TestStore()
        try store.keychain().set("kept", forKey: "k")
        let recoveryKey = try store.location.addRecoveryKey()
        Keychain.closeStore(store.location)
        let index: UInt32
        do {
            let opened = try openStore(store)
            index = try #require(opened.rollbackCounterIndex)
            opened.close()
        }
        do {
            let tpm = try TPMConnection(TPMConfiguration(tcti: store.simulator.tcti))
            defer { tpm.close() }
            try tpm.undefineNVIndex(index)
        }
        let reopened = try store.keychain()
        do {
            _ = try reopened.string(forKey: "k")
            Issue.record("a store whose counter is gone opened")
        } catch {
            #expect(error.code == .rollbackCounterMissing, "\(error)")
            #expect(
                error.message.contains("recovery key") && error.message.contains(String(index, radix: 16)),
                "\(error.message)")
        }
        Keychain.closeStore(store.location)
        _ = try store.location.recover(with: recoveryKey)
        #expect(try store.keychain().string(forKey: "k") == "kept")
        Keychain.closeStore(store.location)
        let recovered = try openStore(store)
        defer { recovered.close() }
        #expect(recovered.isRollbackProtected)
        #expect(recovered.rollbackCounterIndex != nil)
    }
}

private func value(_ text: String) -> ItemValue { ItemValue(kind: .data, bytes: Array(text.utf8)) }

private func expectThrows(sourceLocation: SourceLocation = #_sourceLocation, _ body: () throws -> Void) {
    do {
        try body()
        Issue.record("expected an error", sourceLocation: sourceLocation)
    } catch {}
}

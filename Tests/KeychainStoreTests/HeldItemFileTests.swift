import Foundation
import KeychainStore
import KeychainVocabulary
import SystemCalls
import TPM
import TPMKeychainTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Item files a store keeps open between gets (HeldItemFile): used again only while the name
/// still names the held file, and bounded. Each test reads until the store is seen to hold the
/// file, so the held path is what the rest of the test exercises.
@Suite struct HeldItemFileTests {
    private static func identity(_ account: String) throws -> ItemIdentity {
        try ItemIdentity(accessGroup: "", service: "svc", account: account)
    }

    private static func value(_ text: String) -> ItemValue {
        ItemValue(kind: .string, bytes: Array(text.utf8))
    }

    /// The item files of `root` this process has open, by descriptor.
    private static func heldItemFiles(under root: String) -> [Int32: String] {
        var held: [Int32: String] = [:]
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? [] {
            guard let descriptor = Int32(entry),
                let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + entry),
                target.hasPrefix(root + "/"), target.contains(".item")
            else { continue }
            held[descriptor] = target
        }
        return held
    }

    /// Reads `account` once and returns the item files the store then holds: a get holds the
    /// file it opened at once, so `count` must be held by then.
    private static func readHolding(
        _ store: ItemStore, _ account: String, count: Int = 1, root: String
    ) throws -> [Int32: String] {
        _ = try store.value(identity(account))
        let held = heldItemFiles(under: root)
        #expect(held.count == count, "after reading \(account): \(held)")
        return held
    }

    private static func withStores(_ body: (ItemStore, OtherInstance, String) throws -> Void) throws {
        let simulator = try SoftwareTPM.start()
        defer { simulator.stop() }
        let directory = NSTemporaryDirectory() + "tpm-keychain-held-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let root = directory + "/store"
        let tpm = TPMConfiguration(tcti: simulator.tcti)
        let reader = try ItemStore.open(at: root, tpm: tpm)
        defer { reader.close() }
        try body(reader, OtherInstance(root: root, tpm: tpm), root)
    }

    /// Another instance with its own caches: to the files, another process. Each change opens
    /// and closes it, so that the item files this process has open are the reader's alone (a
    /// write holds the file it put in place).
    private struct OtherInstance {
        let root: String
        let tpm: TPMConfiguration

        func write(
            _ identity: ItemIdentity, mode: ItemWriteMode, value: ItemValue, changes: AttributeChanges
        ) throws {
            let store = try ItemStore.open(at: root, tpm: tpm, create: false)
            defer { store.close() }
            try store.write(identity, mode: mode, value: value, changes: changes)
        }

        func delete(_ identity: ItemIdentity) throws -> Bool {
            let store = try ItemStore.open(at: root, tpm: tpm, create: false)
            defer { store.close() }
            return try store.delete(identity)
        }
    }

    @Test(
        "a held item file is read again through the same descriptor, at most 16 are held, and closing the store closes them"
    )
    func heldFilesAreReusedAndBounded() throws {
        try Self.withStores { reader, writer, root in
            for index in 0..<20 {
                try writer.write(
                    Self.identity("a\(index)"), mode: .add, value: Self.value("v\(index)"), changes: AttributeChanges())
            }
            let first = try Self.readHolding(reader, "a0", root: root)
            #expect(first.count == 1)
            for _ in 0..<5 {
                #expect(try reader.value(Self.identity("a0"))?.bytes == Array("v0".utf8))
            }
            #expect(Self.heldItemFiles(under: root) == first, "the same descriptor serves every get")
            for index in 0..<20 {
                #expect(try reader.value(Self.identity("a\(index)"))?.bytes == Array("v\(index)".utf8))
            }
            let all = Self.heldItemFiles(under: root)
            #expect(all.count == 16, "\(all.count) held")
            reader.close()
            #expect(Self.heldItemFiles(under: root).isEmpty)
        }
    }

    @Test(
        "this process's write holds the file it put in place, the next get reads through it, other items stay held, and a delete lets go at once"
    )
    func ownWritesHoldTheNewFile() throws {
        try Self.withStores { reader, writer, root in
            // Another instance writes them, so that what this one holds is what its gets opened.
            try writer.write(Self.identity("bob"), mode: .add, value: Self.value("b"), changes: AttributeChanges())
            let bob = try #require(try Self.readHolding(reader, "bob", root: root).first)
            try writer.write(Self.identity("alice"), mode: .add, value: Self.value("one"), changes: AttributeChanges())
            let both = try Self.readHolding(reader, "alice", count: 2, root: root)
            let before = try #require(both.first { $0.key != bob.key })

            try reader.write(
                Self.identity("alice"), mode: .update, value: Self.value("two"), changes: AttributeChanges())
            let afterWrite = Self.heldItemFiles(under: root)
            #expect(afterWrite.count == 2, "\(afterWrite)")
            #expect(afterWrite[bob.key] == bob.value, "another item's held file stays held")
            let alice = try #require(afterWrite.first { $0.key != bob.key })
            // The descriptor is the file now at the name: its inode, with its one link.
            var held = stat()
            var atName = stat()
            #expect(fstat(alice.key, &held) == 0 && stat(alice.value, &atName) == 0)
            #expect(held.st_ino == atName.st_ino && held.st_nlink == 1)
            #expect(alice.value == before.value && !alice.value.hasSuffix("(deleted)"))
            #expect(try reader.value(Self.identity("alice"))?.bytes == Array("two".utf8))
            #expect(Self.heldItemFiles(under: root) == afterWrite, "the get opened nothing")

            #expect(try reader.delete(Self.identity("alice")))
            #expect(Self.heldItemFiles(under: root) == [bob.key: bob.value])
            #expect(try reader.value(Self.identity("alice")) == nil)
        }
    }

    @Test(
        "another writer's replacement and removal are seen by the next get, also when the directory's mtime is put back, whether the held file is checked by name or, its directory settled, by stamp",
        arguments: [false, true])
    func replacementByAnotherWriterIsSeenAtOnce(settled: Bool) throws {
        try Self.withStores { reader, writer, root in
            try writer.write(Self.identity("alice"), mode: .add, value: Self.value("one"), changes: AttributeChanges())
            let held = try Self.readHolding(reader, "alice", root: root)
            let file = try #require(held.values.first)
            let directory = (file as NSString).deletingLastPathComponent
            // A get once the directory has settled keeps its stamp: the next get is checked by it.
            if settled { try Self.readOnceSettled(reader, "alice", directory: directory) }
            let before = try Self.modificationTime(of: directory)

            try writer.write(
                Self.identity("alice"), mode: .update, value: Self.value("two"), changes: AttributeChanges())
            // As if the write fell in the same clock tick as the directory's last change.
            try Self.setModificationTime(of: directory, to: before)
            #expect(try reader.value(Self.identity("alice"))?.bytes == Array("two".utf8))

            _ = try Self.readHolding(reader, "alice", root: root)
            if settled { try Self.readOnceSettled(reader, "alice", directory: directory) }
            let settledStamp = try Self.modificationTime(of: directory)
            #expect(try writer.delete(Self.identity("alice")))
            try Self.setModificationTime(of: directory, to: settledStamp)
            #expect(try reader.value(Self.identity("alice")) == nil)
        }
    }

    /// Reads `account` once the kernel's coarse clock has passed the directory's mtime by the
    /// settling time (polled: progress, not a fixed wait), so that the store keeps the stamp.
    private static func readOnceSettled(_ store: ItemStore, _ account: String, directory: String) throws {
        let mtime = try modificationTime(of: directory)
        let settledAt = Int64(mtime.tv_sec) * 1_000_000_000 + Int64(mtime.tv_nsec) + 25_000_000
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            var now = timespec()
            clock_gettime(CLOCK_REALTIME_COARSE, &now)
            if Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec) >= settledAt { break }
            usleep(1000)
        }
        #expect(try store.value(identity(account)) != nil)
    }

    @Test(
        "held item files swapped by rename (the directory's mtime put back), or a held file's mode, or its directory's mode changed, are refused as without holding"
    )
    func tamperingWithHeldFilesIsFoundOut() throws {
        try Self.withStores { reader, writer, root in
            try writer.write(Self.identity("alice"), mode: .add, value: Self.value("a"), changes: AttributeChanges())
            try writer.write(Self.identity("bob"), mode: .add, value: Self.value("b"), changes: AttributeChanges())
            _ = try Self.readHolding(reader, "alice", root: root)
            let held = try Self.readHolding(reader, "bob", count: 2, root: root)
            let files = held.values.sorted()
            #expect(files.count == 2)
            let directory = (files[0] as NSString).deletingLastPathComponent

            func expectRefused(_ account: String, _ code: KeychainError.Code = .unsafeFileSystem) {
                let error = #expect(throws: KeychainError.self) { _ = try reader.value(Self.identity(account)) }
                #expect(error?.code == code, "\(account): \(String(describing: error))")
            }
            for file in files { #expect(chmod(file, 0o640) == 0) }
            expectRefused("alice")
            expectRefused("bob")
            for file in files { #expect(chmod(file, 0o600) == 0) }
            #expect(chmod(directory, 0o755) == 0)
            expectRefused("alice")
            #expect(chmod(directory, 0o700) == 0)
            #expect(try reader.value(Self.identity("alice"))?.bytes == Array("a".utf8))

            // Swap the two files by rename: each held inode keeps its one link, at the other name;
            // the directory's mtime put back, as if the swap fell in its last change's clock tick.
            let before = try Self.modificationTime(of: directory)
            let aside = directory + "/aside"
            #expect(rename(files[0], aside) == 0 && rename(files[1], files[0]) == 0 && rename(aside, files[1]) == 0)
            try Self.setModificationTime(of: directory, to: before)
            expectRefused("alice", .tampered)
            expectRefused("bob", .tampered)
        }
    }

    @Test(
        "four threads reading held files while another instance rewrites the items: every get returns a value that was written, never an error",
        .tags(.concurrency))
    func concurrentGetsThroughHeldFiles() throws {
        try Self.withStores { reader, writer, root in
            let accounts = ["a", "b", "c"]
            for account in accounts {
                try writer.write(
                    Self.identity(account), mode: .add, value: Self.value("0"), changes: AttributeChanges())
                _ = try Self.readHolding(reader, account, count: accounts.firstIndex(of: account)! + 1, root: root)
            }
            let failures = Locked<[String]>([])
            let seen = Locked<Set<String>>([])
            let rounds = 300
            let readers = try (0..<4).map { index in
                try JoinableThread {
                    for round in 0..<rounds {
                        let account = accounts[(round + index) % accounts.count]
                        do {
                            guard let value = try reader.value(Self.identity(account)) else {
                                failures.withLock { $0.append("\(account) missing") }
                                continue
                            }
                            let text = String(decoding: value.bytes, as: UTF8.self)
                            seen.withLock { _ = $0.insert(text) }
                            if Int(text) == nil { failures.withLock { $0.append("\(account): \(text)") } }
                        } catch {
                            failures.withLock { $0.append("\(account): \(error)") }
                        }
                    }
                }
            }
            for version in 1...30 {
                try writer.write(
                    Self.identity(accounts[version % accounts.count]), mode: .update, value: Self.value("\(version)"),
                    changes: AttributeChanges())
            }
            for thread in readers { thread.join() }
            #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0 }.prefix(5))")
            #expect(!seen.withLock { $0 }.isEmpty)
            for (index, account) in accounts.enumerated() {
                let last = (1...30).last { $0 % accounts.count == index }!
                #expect(try reader.value(Self.identity(account))?.bytes == Array("\(last)".utf8))
            }
        }
    }

    private static func modificationTime(of path: String) throws -> timespec {
        var status = stat()
        guard stat(path, &status) == 0 else { throw POSIXError(.ENOENT) }
        return status.st_mtim
    }

    private static func setModificationTime(of path: String, to time: timespec) throws {
        let omit = (1 << 30) - 2 // UTIME_OMIT, which Glibc's module does not export
        var times = [timespec(tv_sec: 0, tv_nsec: omit), time]
        guard utimensat(AT_FDCWD, path, &times, 0) == 0 else { throw POSIXError(.EPERM) }
    }
}

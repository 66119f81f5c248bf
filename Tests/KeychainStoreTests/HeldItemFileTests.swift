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

/// Item files a store keeps open between gets (HeldItemFile): used again only while nothing can
/// have put another file at the name, and bounded. Each test waits, by reading, until the store
/// is seen to hold the file (its directory must first be left alone for a moment), so the held
/// path is what the rest of the test exercises.
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

    /// Reads `account` until the store holds `count` item files (progress, not a fixed wait: the
    /// directory settles once the clock has moved on).
    private static func readUntilHeld(
        _ store: ItemStore, _ account: String, count: Int = 1, root: String
    ) throws -> [Int32: String] {
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            _ = try store.value(identity(account))
            let held = heldItemFiles(under: root)
            if held.count >= count { return held }
            usleep(1000)
        }
        Issue.record("the store never held the item file of \(account)")
        return [:]
    }

    private static func withStores(_ body: (ItemStore, ItemStore, String) throws -> Void) throws {
        let simulator = try SoftwareTPM.start()
        defer { simulator.stop() }
        let directory = NSTemporaryDirectory() + "tpm-keychain-held-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let root = directory + "/store"
        let tpm = TPMConfiguration(tcti: simulator.tcti)
        let reader = try ItemStore.open(at: root, tpm: tpm)
        defer { reader.close() }
        // A second instance with its own caches: to the files, another process.
        let writer = try ItemStore.open(at: root, tpm: tpm, create: false)
        defer { writer.close() }
        try body(reader, writer, root)
    }

    @Test(
        "a held item file is read again through the same descriptor, at most 16 are held, and closing the store closes them"
    )
    func heldFilesAreReusedAndBounded() throws {
        try Self.withStores { reader, _, root in
            for index in 0..<20 {
                try reader.write(
                    Self.identity("a\(index)"), mode: .add, value: Self.value("v\(index)"), changes: AttributeChanges())
            }
            let first = try Self.readUntilHeld(reader, "a0", root: root)
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
        "this process's own write or delete of an item lets go of its group's held files at once: a removed file's inode does not stay open"
    )
    func ownChangesReleaseHeldFiles() throws {
        try Self.withStores { reader, _, root in
            try reader.write(Self.identity("alice"), mode: .add, value: Self.value("one"), changes: AttributeChanges())
            _ = try Self.readUntilHeld(reader, "alice", root: root)
            try reader.write(
                Self.identity("alice"), mode: .update, value: Self.value("two"), changes: AttributeChanges())
            #expect(Self.heldItemFiles(under: root).isEmpty)
            _ = try Self.readUntilHeld(reader, "alice", root: root)
            #expect(try reader.delete(Self.identity("alice")))
            #expect(Self.heldItemFiles(under: root).isEmpty)
            #expect(try reader.value(Self.identity("alice")) == nil)
        }
    }

    @Test(
        "another writer's replacement and removal are seen by the next get, also when the directory's mtime is put back (the held file has lost its link)"
    )
    func replacementByAnotherWriterIsSeenAtOnce() throws {
        try Self.withStores { reader, writer, root in
            try writer.write(Self.identity("alice"), mode: .add, value: Self.value("one"), changes: AttributeChanges())
            let held = try Self.readUntilHeld(reader, "alice", root: root)
            let file = try #require(held.values.first)
            let directory = (file as NSString).deletingLastPathComponent
            let before = try Self.modificationTime(of: directory)

            try writer.write(
                Self.identity("alice"), mode: .update, value: Self.value("two"), changes: AttributeChanges())
            // As if the write fell in the same clock tick as the directory's last change.
            try Self.setModificationTime(of: directory, to: before)
            #expect(try reader.value(Self.identity("alice"))?.bytes == Array("two".utf8))

            _ = try Self.readUntilHeld(reader, "alice", root: root)
            #expect(try writer.delete(Self.identity("alice")))
            try Self.setModificationTime(of: directory, to: before)
            #expect(try reader.value(Self.identity("alice")) == nil)
        }
    }

    @Test(
        "held item files swapped by rename, or a held file's mode, or its directory's mode changed, are refused as without holding"
    )
    func tamperingWithHeldFilesIsFoundOut() throws {
        try Self.withStores { reader, writer, root in
            try writer.write(Self.identity("alice"), mode: .add, value: Self.value("a"), changes: AttributeChanges())
            try writer.write(Self.identity("bob"), mode: .add, value: Self.value("b"), changes: AttributeChanges())
            _ = try Self.readUntilHeld(reader, "alice", root: root)
            let held = try Self.readUntilHeld(reader, "bob", count: 2, root: root)
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

            // Swap the two files by rename: each held inode keeps its one link, at the other name.
            let aside = directory + "/aside"
            #expect(rename(files[0], aside) == 0 && rename(files[1], files[0]) == 0 && rename(aside, files[1]) == 0)
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
                _ = try Self.readUntilHeld(reader, account, count: accounts.firstIndex(of: account)! + 1, root: root)
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

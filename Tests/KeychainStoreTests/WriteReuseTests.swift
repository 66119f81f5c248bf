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

/// What a store keeps between writes (the manifest's descriptor, its lock files, what its last
/// writes sealed) is used again only while it is still what another writer would see: each test
/// changes the files under one instance, as another process would, and checks that the next
/// write follows the change.
@Suite struct WriteReuseTests {
    private static func identity(_ account: String, service: String = "svc") throws -> ItemIdentity {
        try ItemIdentity(accessGroup: "", service: service, account: account)
    }

    private static func value(_ text: String) -> ItemValue {
        ItemValue(kind: .string, bytes: Array(text.utf8))
    }

    /// Two instances of one new store, each with its own caches: to the files, two processes.
    private static func withStores(
        timeout: Duration? = nil, _ body: (ItemStore, ItemStore, String) throws -> Void
    ) throws {
        let simulator = try SoftwareTPM.start()
        defer { simulator.stop() }
        let directory = NSTemporaryDirectory() + "tpm-keychain-reuse-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let root = directory + "/store"
        let tpm = TPMConfiguration(tcti: simulator.tcti, timeout: timeout)
        let first = try ItemStore.open(at: root, tpm: tpm)
        defer { first.close() }
        let second = try ItemStore.open(at: root, tpm: tpm, create: false)
        defer { second.close() }
        try body(first, second, root)
    }

    /// A format-2 item file's header size (docs/FORMAT.md): its attributes section follows.
    private static let formatTwoHeaderSize = 124

    private static func manifestPath(_ root: String) throws -> String {
        let name = try #require(
            try FileManager.default.contentsOfDirectory(atPath: root).first {
                $0.hasPrefix("manifest") && !$0.hasSuffix(".lock")
            })
        return root + "/" + name
    }

    private static func size(_ path: String) -> Int {
        var status = stat()
        return lstat(path, &status) == 0 ? Int(status.st_size) : -1
    }

    /// The files under `root` this process has open whose names end with `suffix`.
    private static func openFiles(under root: String, endingWith suffix: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []).compactMap { entry in
            guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + entry),
                target.hasPrefix(root + "/"), target.hasSuffix(suffix)
            else { return nil }
            return target
        }
    }

    @Test(
        "a manifest put in place by another writer (a new inode, as a compaction makes) gets the next records, not the descriptor kept from before"
    )
    func replacedManifestGetsTheNextRecords() throws {
        try Self.withStores { store, _, root in
            try store.write(Self.identity("alice"), mode: .add, value: Self.value("one"), changes: AttributeChanges())
            let manifest = try Self.manifestPath(root)
            // A copy renamed over it: the same records in a new inode.
            let copy = manifest + ".copy"
            try FileManager.default.copyItem(atPath: manifest, toPath: copy)
            chmod(copy, 0o600)
            #expect(rename(copy, manifest) == 0)
            let before = Self.size(manifest)
            try store.write(Self.identity("bob"), mode: .add, value: Self.value("two"), changes: AttributeChanges())
            #expect(Self.size(manifest) == before + 2 * 64, "the write's two records went to the file at the name")
            #expect(Self.openFiles(under: root, endingWith: " (deleted)").isEmpty)
        }
    }

    @Test("a kept manifest descriptor is checked again before each use: a second hard link to the manifest is refused")
    func keptManifestIsCheckedAgain() throws {
        try Self.withStores { store, _, root in
            try store.write(Self.identity("alice"), mode: .add, value: Self.value("one"), changes: AttributeChanges())
            let manifest = try Self.manifestPath(root)
            #expect(link(manifest, root + "/elsewhere") == 0)
            do {
                try store.write(Self.identity("carol"), mode: .add, value: Self.value("3"), changes: AttributeChanges())
                Issue.record("a write through a manifest with two links succeeded")
            } catch let error as KeychainError {
                #expect(error.code == .unsafeFileSystem, "\(error)")
            }
        }
    }

    @Test(
        "an upsert keeps the attributes another writer gave the item since this store wrote it, and a changed attributes byte is still tampering"
    )
    func upsertFollowsOtherWritersAndTampering() throws {
        try Self.withStores { store, other, root in
            let alice = try Self.identity("alice")
            var labelA = AttributeChanges()
            labelA.label = "from the first"
            try store.write(alice, mode: .add, value: Self.value("one"), changes: labelA)
            var labelB = AttributeChanges()
            labelB.label = "from the second"
            try other.write(alice, mode: .update, value: nil, changes: labelB)
            try store.write(alice, mode: .upsert, value: Self.value("two"), changes: AttributeChanges())
            let item = try #require(try other.item(alice))
            #expect(item.attributes.label == "from the second")
            #expect(item.value.bytes == Array("two".utf8))

            // This store wrote the file last; a flipped byte in its attributes section is found.
            try store.write(alice, mode: .upsert, value: Self.value("three"), changes: AttributeChanges())
            let files = try FileManager.default.subpathsOfDirectory(atPath: root).filter { $0.hasSuffix(".item") }
            let file = root + "/" + (try #require(files.first))
            var bytes = try #require(FileManager.default.contents(atPath: file))
            bytes[Self.formatTwoHeaderSize] ^= 0x01 // the first byte of the sealed attributes
            try bytes.write(to: URL(fileURLWithPath: file))
            chmod(file, 0o600)
            do {
                try store.write(alice, mode: .upsert, value: Self.value("four"), changes: AttributeChanges())
                Issue.record("an upsert over a tampered file succeeded")
            } catch let error as KeychainError {
                #expect(error.code == .tampered, "\(error)")
            }
        }
    }

    @Test(
        "the group and store locks a store keeps open between writes still exclude another holder, and it keeps at most 16 of them"
    )
    func keptLocksStillExclude() throws {
        try Self.withStores(timeout: .milliseconds(300)) { store, _, root in
            let alice = try Self.identity("alice")
            try store.write(alice, mode: .add, value: Self.value("one"), changes: AttributeChanges())
            let groupLocks = Self.openFiles(under: root, endingWith: "/.lock")
            #expect(groupLocks.count == 1, "the group's lock file is kept open: \(groupLocks)")
            let lockPath = try #require(groupLocks.first)
            /// A write while `holder` has a lock another writer needs: held back until it times out.
            func expectHeldBack(by holder: LockFile, _ what: String) throws {
                #expect(try holder.lock(wait: false))
                do {
                    try store.write(alice, mode: .upsert, value: Self.value("held"), changes: AttributeChanges())
                    Issue.record("a write went ahead while another holder had \(what)")
                } catch {
                    #expect(error.code == .timedOut, "\(error)")
                }
                holder.unlock()
                try store.write(alice, mode: .upsert, value: Self.value("free"), changes: AttributeChanges())
            }
            do {
                try expectHeldBack(by: try LockFile(lockPath), "the group's lock")
            }
            // The store's own lock, taken exclusive as a rotation takes it, holds writes back too.
            let rootDescriptor = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            defer { close(rootDescriptor) }
            try expectHeldBack(by: try LockFile(directory: rootDescriptor), "the store's lock exclusive")

            for index in 0..<40 {
                try store.write(
                    Self.identity("a", service: "service \(index)"), mode: .add, value: Self.value("v"),
                    changes: AttributeChanges())
            }
            let kept = Self.openFiles(under: root, endingWith: "/.lock").count
            #expect(kept >= 1 && kept <= 16, "\(kept) group lock files kept open")
            store.close()
            #expect(Self.openFiles(under: root, endingWith: "/.lock").isEmpty)
        }
    }
}

import Foundation
import KeychainVocabulary
import Testing

@testable import KeychainStore

/// The rollback guard's state machine (`Rollback/RollbackGuard.swift`) without a TPM: how a
/// manifest judges an item file's generation, which generation a write takes, when a write must
/// announce itself, what a listing must have seen. The checks over real files and counters are
/// in TPMKeychainTests' RollbackTests.
@Suite struct RollbackGuardTests {
    static let live = Manifest.ItemKey(fileName: String(repeating: "a", count: 32) + ".item")!
    static let deleted = Manifest.ItemKey(fileName: String(repeating: "b", count: 32) + ".item")!
    static let interrupted = Manifest.ItemKey(fileName: String(repeating: "c", count: 32) + ".item")!
    static let writing = Manifest.ItemKey(fileName: String(repeating: "d", count: 32) + ".item")!
    static let unknown = Manifest.ItemKey(fileName: String(repeating: "e", count: 32) + ".item")!

    /// A manifest that records one item of each kind, in two groups, with a high-water mark of 20.
    static func manifest() -> Manifest.State {
        var state = Manifest.State(
            storeID: [UInt8](repeating: 7, count: 16), counterIndex: 0x01A0_0000, highWater: 20, lastMAC: [],
            validSize: 0)
        state.entries[live] = .init(generation: 5, live: true, group: "g1")
        state.entries[deleted] = .init(generation: 7, live: false, group: "g1", finished: true)
        state.entries[interrupted] = .init(generation: 9, live: false, group: "g2")
        state.entries[writing] = .init(generation: 3, live: true, group: "g2", pending: 4)
        return state
    }

    static func makeGuard(_ state: Manifest.State?) throws -> RollbackGuard {
        // The root is where the manifest's lock would be; none of these tests takes it.
        let path = NSTemporaryDirectory() + "rollback-guard-" + UUID().uuidString
        let root = try #require(try Directory.open(path, in: nil, create: true))
        defer { try? FileManager.default.removeItem(atPath: path) }
        return RollbackGuard(
            state.map { .init(manifest: $0, inode: 1, fileName: Manifest.fileName) }, root: root,
            lockTimeout: .seconds(1))
    }

    @Test(
        "a generation is judged against the manifest's entry",
        arguments: [
            (live, 5, RollbackGuard.Verdict.current), (live, 6, .current), (live, 4, .older(expected: 5)),
            (deleted, 7, .restoredDeleted), (deleted, 8, .current), (deleted, 6, .restoredDeleted),
            (interrupted, 9, .deleted), (interrupted, 10, .current),
            (writing, 4, .current), (writing, 2, .older(expected: 3)),
            (unknown, 20, .restoredDeleted), (unknown, 21, .current),
        ] as [(Manifest.ItemKey, UInt64, RollbackGuard.Verdict)])
    func verdicts(file: Manifest.ItemKey, generation: UInt64, expected: RollbackGuard.Verdict) throws {
        let rollback = try Self.makeGuard(Self.manifest())
        #expect(rollback.verdict(generation, file: file) == expected)
    }

    @Test("an item file's name gives its manifest key: 32 hex digits of either case and .item, nothing else")
    func itemKeysFromFileNames() throws {
        let digits = "0123456789abcdef0123456789ABCDEF"
        let key = try #require(Manifest.ItemKey(fileName: digits + ".item"))
        #expect(key.high == 0x0123_4567_89ab_cdef && key.low == 0x0123_4567_89ab_cdef)
        #expect(key.fileName == digits.lowercased() + ".item")
        #expect(Manifest.ItemKey(fileName: key.fileName) == key)
        for name in [
            digits, digits + ".itex", digits + ".items", String(digits.dropLast()) + ".item",
            String(digits.dropLast()) + "g.item", String(digits.dropLast()) + "/.item", "." + digits + "item",
            String(digits.dropLast()) + "é.item", "",
        ] {
            #expect(Manifest.ItemKey(fileName: name) == nil, "\(name)")
        }
    }

    @Test("a store without a manifest judges nothing and records everything as current")
    func unprotected() throws {
        let rollback = try Self.makeGuard(nil)
        #expect(!rollback.isProtected)
        #expect(rollback.verdict(1, file: Self.live) == nil)
        #expect(rollback.isRecorded(Self.live.fileName, generation: 1))
        #expect(rollback.nextGeneration(file: Self.live.fileName, existing: 3) == 4)
    }

    @Test("a write's generation is above the file's, the entry's, and for a new item the high-water mark")
    func nextGenerations() throws {
        let rollback = try Self.makeGuard(Self.manifest())
        #expect(rollback.nextGeneration(file: Self.live.fileName, existing: 5) == 6)
        #expect(rollback.nextGeneration(file: Self.live.fileName, existing: 11) == 12)
        #expect(rollback.nextGeneration(file: Self.deleted.fileName, existing: nil) == 8)
        #expect(rollback.nextGeneration(file: Self.unknown.fileName, existing: nil) == 21)
    }

    @Test("only a write of an item not listed as live announces itself before its rename")
    func announcements() throws {
        let rollback = try Self.makeGuard(Self.manifest())
        #expect(!rollback.writeNeedsAnnouncement(Self.live.fileName))
        #expect(rollback.writeNeedsAnnouncement(Self.deleted.fileName))
        #expect(rollback.writeNeedsAnnouncement(Self.unknown.fileName))
        #expect(rollback.isRecorded(Self.live.fileName, generation: 5))
        #expect(!rollback.isRecorded(Self.live.fileName, generation: 6))
        #expect(!rollback.isRecorded(Self.deleted.fileName, generation: 7))
    }

    @Test("a listing that missed a live item of its groups is told which; other groups are not its business")
    func missingItems() throws {
        let rollback = try Self.makeGuard(Self.manifest())
        let missing = rollback.missing(groups: ["g1", "g2"], seen: [Self.writing])
        #expect(missing.map(\.file) == [Self.live.fileName])
        #expect(missing.map(\.group) == ["g1"])
        #expect(rollback.missing(groups: ["g2"], seen: []).map(\.file) == [Self.writing.fileName])
        #expect(rollback.missing(groups: ["g3"], seen: []).isEmpty)
    }

    @Test("closing forgets the manifest: the guard then checks nothing")
    func replacedByNothing() throws {
        let rollback = try Self.makeGuard(Self.manifest())
        #expect(rollback.isProtected && rollback.counterIndex == 0x01A0_0000)
        rollback.replace(with: nil)
        #expect(!rollback.isProtected && rollback.counterIndex == nil && rollback.epoch == nil)
    }
}

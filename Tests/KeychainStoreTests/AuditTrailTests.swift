import Foundation
import KeychainVocabulary
import Testing

@testable import KeychainStore

/// The store's audit trail: a MAC chain in `audit.log` whose head is an item of the store.
@Suite("the audit trail")
struct AuditTrailTests {
    static func log(_ store: EngineStore) -> String { store.path + "/audit.log" }

    static func lines(_ store: EngineStore) throws -> [String] {
        try String(contentsOfFile: log(store), encoding: .utf8).split(separator: "\n").map(String.init)
    }

    static func write(_ lines: [String], _ store: EngineStore) throws {
        try (lines.map { $0 + "\n" }.joined()).write(toFile: log(store), atomically: false, encoding: .utf8)
    }

    /// A store keeping a trail of five records.
    static func trail() throws -> (EngineStore, ItemStore) {
        let store = try EngineStore()
        let opened = try store.open()
        try opened.enableAudit()
        for index in 1...5 { try opened.appendAudit("record \(index)\nwith a line break") }
        return (store, opened)
    }

    @Test("records are kept in order, one line each, and read back intact")
    func intact() throws {
        let (store, opened) = try Self.trail()
        defer { opened.close() }
        let reading = try opened.readAudit()
        #expect(reading.problem == nil)
        #expect(reading.records.map(\.sequence) == [1, 2, 3, 4, 5])
        #expect(reading.records.first?.text == "record 1 with a line break")
        #expect(try Self.lines(store).count == 5)
        // A second enable changes nothing.
        try opened.enableAudit()
        #expect(try opened.readAudit().records.count == 5)
        let attributes = try FileManager.default.attributesOfItem(atPath: Self.log(store))
        #expect((attributes[.posixPermissions] as? Int) == 0o600)
    }

    @Test("an edited byte, a removed record, swapped records and a cut tail are each reported where they are")
    func tampering() throws {
        let (store, opened) = try Self.trail()
        defer { opened.close() }
        let original = try Self.lines(store)

        var edited = original
        edited[2] = edited[2].replacingOccurrences(of: "record 3", with: "record 9")
        try Self.write(edited, store)
        var reading = try opened.readAudit()
        #expect(reading.records.count == 2 && reading.problem?.contains("Record 3 (line 3)") == true, "\(reading)")

        var removed = original
        removed.remove(at: 1)
        try Self.write(removed, store)
        reading = try opened.readAudit()
        #expect(reading.records.count == 1 && reading.problem?.contains("Record 2") == true, "\(reading)")

        var swapped = original
        swapped.swapAt(3, 4)
        try Self.write(swapped, store)
        #expect(try opened.readAudit().records.count == 3)

        try Self.write(Array(original.prefix(3)), store)
        reading = try opened.readAudit()
        #expect(reading.records.count == 3 && reading.problem?.contains("cut from its end") == true, "\(reading)")

        try Self.write([], store)
        #expect(try opened.readAudit().problem?.contains("cut from its end") == true)

        // Put back whole, it reads intact again, and appending goes on from the head.
        try Self.write(original, store)
        try opened.appendAudit("record 6")
        reading = try opened.readAudit()
        #expect(reading.problem == nil && reading.records.count == 6, "\(reading)")
    }

    @Test("a writer that died after its line and before its head: the next append adopts that line")
    func diedBeforeItsHead() throws {
        let (store, opened) = try Self.trail()
        defer { opened.close() }
        let key = try opened.auditKey()
        let last = try #require(try opened.readAudit().records.last)
        let orphan = ItemStore.AuditRecord(sequence: 6, time: 1, text: "orphan", mac: [])
        let mac = ItemStore.mac(key, previous: last.mac, orphan)
        let line = ItemStore.encode(ItemStore.AuditRecord(sequence: 6, time: 1, text: "orphan", mac: mac))
        let handle = try #require(FileHandle(forWritingAtPath: Self.log(store)))
        handle.seekToEndOfFile()
        handle.write(Data(line.utf8))
        try handle.close()
        #expect(try opened.readAudit().problem == nil, "one record past the head is a writer that died")
        try opened.appendAudit("after")
        let reading = try opened.readAudit()
        #expect(reading.problem == nil && reading.records.map(\.text).suffix(2) == ["orphan", "after"], "\(reading)")
    }

    @Test("a store without a trail says so, and appends nothing")
    func notKept() throws {
        let store = try EngineStore()
        let opened = try store.open()
        defer { opened.close() }
        try opened.appendAudit("nothing")
        #expect(!FileManager.default.fileExists(atPath: Self.log(store)))
        #expect(throws: KeychainError.self) { try opened.readAudit() }
        try opened.enableAudit()
        try opened.disableAudit()
        #expect(try !opened.auditIsEnabled())
    }
}

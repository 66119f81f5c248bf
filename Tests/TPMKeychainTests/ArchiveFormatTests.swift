import Foundation
import TPMKeychain
import TPMKeychainTesting
import Testing

/// docs/FORMAT.md, "Export archives", held to what it says: the committed vector imports with
/// the values the document lists, and a second reader written from the document alone (Python)
/// reads what this build exports.
@Suite struct ArchiveFormatTests {
    static let vector = ProjectFixtures.directory.appendingPathComponent("archives/vector-1.tkar").path
    static let reader = ProjectFixtures.directory.appendingPathComponent("archives/read-archive.py").path

    struct ReadArchive: Decodable {
        struct Item: Decodable, Equatable {
            let `class`: String
            let accessibility: Int
            let kind: Int
            let attributes: [String: String]
            let value: String
        }
        struct Derivation: Decodable {
            let scrypt: String
            let archiveKey: String
        }
        let created: Int64
        let items: [Item]
        let derivation: Derivation?
    }

    static func pythonRead(_ path: String, passphrase: String, derivation: Bool = false) throws -> ReadArchive {
        let output = try SystemTool.output(
            "/usr/bin/python3", [reader, path] + (derivation ? ["--derivation"] : []),
            input: Data((passphrase + "\n").utf8))
        return try JSONDecoder().decode(ReadArchive.self, from: output)
    }

    @Test("the committed vector imports: its two items, values, labels and dates as docs/FORMAT.md lists them")
    func vectorImports() async throws {
        let store = try TestStore()
        let report = try await KeychainArchive.importArchive(
            at: Self.vector, into: store.location, passphrase: "test vector passphrase")
        #expect(report.added == 2)
        #expect(report.created == Date(timeIntervalSince1970: 1_795_775_548.800816640))
        let items = try Keychain.allItems(in: store.location)
        let mail = try #require(items.first { $0.service == "example.com" })
        #expect(mail.account == "alice" && mail.label == "Example" && mail.accessibility == .whenUnlocked)
        #expect(mail.creationDate == Date(timeIntervalSince1970: Double(0x18eb_e058_db0c_3125) / 1e9))
        #expect(
            try Keychain(service: "example.com", location: store.location).string(forKey: "alice") == "correct horse")
    }

    @Test("the second reader derives the documented key schedule values from the vector")
    func vectorDerivation() throws {
        let read = try Self.pythonRead(Self.vector, passphrase: "test vector passphrase", derivation: true)
        #expect(read.derivation?.scrypt == "9de5563cc212567b0b9df689d26ff8826b7c81c7c83c044e1af91d78b5265d9d")
        #expect(read.derivation?.archiveKey == "9b813022b58f8a4bd36d954714f08502e5cf157c454b6118a939f69a57c8959e")
        #expect(read.items.map(\.value) == [Array("correct horse".utf8).hex, Array("tok3n".utf8).hex])
        #expect(throws: (any Error).self) { _ = try Self.pythonRead(Self.vector, passphrase: "wrong") }
    }

    @Test("what this build exports, the second reader reads: every item, attribute and value")
    func secondReaderReadsExports() async throws {
        let source = try TestStore()
        let keychain = try source.keychain("com.example.reader")
        try keychain.set("first secret", forKey: "one", label: "One", comment: "a comment")
        try keychain.set(Data(repeating: 0xA5, count: 70_000), forKey: "large", accessibility: .afterFirstUnlock)
        let archive = source.directory + "-reader.tkar"
        defer { try? FileManager.default.removeItem(atPath: archive) }
        _ = try await KeychainArchive.export(
            from: source.location, to: archive,
            protection: .passphrase("reader passphrase", cost: .init(log2N: 10, blockSize: 8, parallelism: 1)))
        let read = try Self.pythonRead(archive, passphrase: "reader passphrase")
        try #require(read.items.count == 2)
        // The archive's order is the store's walk order, not creation order.
        let one = try #require(read.items.first { $0.attributes["acct"] == Array("one".utf8).hex })
        #expect(one.class == "genp" && one.accessibility == 1 && one.kind == 1)
        #expect(one.value == Array("first secret".utf8).hex)
        #expect(one.attributes["svce"] == Array("com.example.reader".utf8).hex)
        #expect(
            one.attributes["labl"] == Array("One".utf8).hex && one.attributes["icmt"] == Array("a comment".utf8).hex)
        let large = try #require(read.items.first { $0.attributes["acct"] == Array("large".utf8).hex })
        #expect(large.accessibility == 2 && large.kind == 0)
        let expected = [UInt8](repeating: 0xA5, count: 70_000).hex
        #expect(large.value == expected, "the large value differs (\(large.value.count / 2) bytes)")
    }
}

extension Array where Element == UInt8 {
    fileprivate var hex: String { map { String(format: "%02x", $0) }.joined() }
}

import Foundation
import Secrets
import Testing

@testable import SecretService

/// libsecret's keyring file as the portal move writes it: GVariant as GLib serializes it, items
/// that open only with the application's secret, and damaged files refused with an error.
@Suite("portal keyring files")
struct PortalKeyringTests {
    static let secret = SecretBytes(copying: (0..<64).map { UInt8($0) })

    /// GLib's own serialization of this value (python3-gi, `GLib.Variant.get_data_as_bytes`).
    @Test("a keyring's GVariant is byte for byte GLib's, and reads back")
    func glibVector() throws {
        let value = GVariant.tuple([
            .uint32(32), .bytes([UInt8](repeating: 1, count: 32)), .uint32(100_000), .uint64(5), .uint32(1),
            .array([
                .tuple([
                    .array([
                        .dictionaryEntry(.string("a"), .bytes(Array("xy".utf8))),
                        .dictionaryEntry(.string("bb"), .bytes(Array("z".utf8))),
                    ]), .bytes(Array("blob".utf8)),
                ])
            ]),
        ])
        let glib =
            "20000000" + String(repeating: "01", count: 32)
            + "a086010005000000000000000100000061007879026262007a03050a626c6f620c1124"
        let serialized = try value.serialized(as: PortalKeyring.fileType)
        #expect(serialized.map { String(format: "%02x", $0) }.joined() == glib)
        #expect(try GVariant(serialized[...], as: PortalKeyring.fileType) == value)
    }

    @Test("items sealed with the application's secret read back; a replaced item keeps its creation time")
    func roundTrip() throws {
        var keyring = try PortalKeyring(contents: nil, secret: Self.secret)
        let first = PortalKeyring.Item(
            attributes: ["service": "api", "user": "alice"], label: "API", created: 10, modified: 10,
            secret: Array("tok-1".utf8))
        try keyring.replace(with: first)
        try keyring.replace(
            with: .init(attributes: ["service": "web"], label: "Web", created: 11, modified: 11, secret: [0, 255]))
        var changed = first
        changed.created = 99
        changed.modified = 20
        changed.secret = Array("tok-2".utf8)
        try keyring.replace(with: changed)
        let bytes = try keyring.serialized(now: 30)
        #expect(bytes.starts(with: Array("GnomeKeyring\n\r\0\n".utf8) + [1, 0]))
        #expect(Data(bytes).range(of: Data("tok-".utf8)) == nil, "no secret in clear")
        #expect(Data(bytes).range(of: Data("alice".utf8)) == nil, "attribute values are hashed")

        let items = try PortalKeyring(contents: bytes, secret: Self.secret).items()
        #expect(items.count == 2)
        let api = try #require(items.first { $0.attributes["service"] == "api" })
        #expect(api.secret == Array("tok-2".utf8) && api.created == 10 && api.modified == 20 && api.label == "API")
        #expect(items.contains { $0.attributes == ["service": "web"] && $0.secret == [0, 255] })
    }

    @Test("another secret, a flipped byte, a truncation and garbage are refused with an error, never a crash")
    func damagedFiles() throws {
        var keyring = try PortalKeyring(contents: nil, secret: Self.secret)
        try keyring.replace(
            with: .init(attributes: ["service": "api"], label: "API", created: 1, modified: 1, secret: [1, 2, 3]))
        let bytes = try keyring.serialized(now: 2)
        let other = SecretBytes(copying: [UInt8](repeating: 7, count: 64))
        #expect(throws: PortalKeyring.Failure.self) { try PortalKeyring(contents: bytes, secret: other) }
        // The file's modification time and usage count (18 + 40..<52) are not authenticated, in
        // libsecret's format as in ours; everything else is.
        let unauthenticated = (18 + 40)..<(18 + 52)
        for index in 18..<bytes.count where !unauthenticated.contains(index) {
            var flipped = bytes
            flipped[index] ^= 0x40
            // A flip in the salt or iterations changes the key: every item then fails its MAC.
            #expect(throws: PortalKeyring.Failure.self, "byte \(index)") {
                _ = try PortalKeyring(contents: flipped, secret: Self.secret).items()
            }
        }
        for length in 0..<bytes.count {
            #expect(throws: PortalKeyring.Failure.self, "\(length) bytes") {
                _ = try PortalKeyring(contents: Array(bytes.prefix(length)), secret: Self.secret)
            }
        }
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<300 {
            let garbage =
                PortalKeyring.header
                + (0..<Int.random(in: 0..<200, using: &generator)).map { _ in UInt8.random(in: 0...255) }
            _ = try? PortalKeyring(contents: garbage, secret: Self.secret)
        }
    }
}

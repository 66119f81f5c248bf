import Testing

@testable import Passkeys

/// CTAP2's canonical CBOR: what is written is the one canonical form, and what is read is checked
/// before anything is believed.
@Suite("CTAP2 CBOR")
struct CBORTests {
    static func hex(_ bytes: [UInt8]) -> String { bytes.map { String($0, radix: 16).leftPadded }.joined() }

    @Test("integers take their shortest form, and map keys sort as CTAP2 says: shorter encodings first, then bytewise")
    func canonicalForm() throws {
        #expect(Self.hex(CBOR.int(0).encoded()) == "00")
        #expect(Self.hex(CBOR.int(23).encoded()) == "17")
        #expect(Self.hex(CBOR.int(24).encoded()) == "1818")
        #expect(Self.hex(CBOR.int(256).encoded()) == "190100")
        #expect(Self.hex(CBOR.int(-1).encoded()) == "20")
        #expect(Self.hex(CBOR.int(-7).encoded()) == "26")
        #expect(Self.hex(CBOR.int(-25).encoded()) == "3818")
        #expect(Self.hex(CBOR.int(Int64(UInt32.max) + 1).encoded()) == "1b0000000100000000")
        // CTAP 2.1 §8's example order (RFC 7049's canonical one): 10, -1, false, 100, "z", [-1], "aa", [100].
        let map = CBOR.map([
            .bool(false): .null, .array([.int(-1)]): .null, .array([.int(100)]): .null, .text("aa"): .null,
            .text("z"): .null, .int(-1): .null, .int(100): .null, .int(10): .null,
        ])
        #expect(Self.hex(map.encoded()) == "a80af620f6f4f61864f6617af68120f6626161f6811864f6")
        let nested = CBOR.map([.int(1): .bytes([1, 2]), .int(2): .map([.text("id"): .text("example.com")])])
        #expect(try CBOR(decoding: nested.encoded()) == nested)
    }

    @Test(
        "malformed input is refused with an error: truncation, lengths past the end, indefinite lengths, tags, floats, duplicate keys, deep nesting, trailing bytes"
    )
    func malformed() throws {
        let refused: [[UInt8]] = [
            [], [0x18], [0x19, 0x01], [0x42, 0x01], [0x5A, 0xFF, 0xFF, 0xFF, 0xFF], [0x9F, 0xFF], [0x5F],
            [0xC1, 0x00], [0xF9, 0x3C, 0x00], [0xFB] + [UInt8](repeating: 0, count: 8), [0xA2, 0x01, 0x00, 0x01, 0x01],
            [0x62, 0xFF, 0xFE], [0x01, 0x02], [0x9B, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF],
            [0xBB, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF], [UInt8](repeating: 0x81, count: 20) + [0x00],
            [0xF7], [0xFF],
        ]
        for bytes in refused {
            #expect(throws: CBOR.Malformed.self, "\(Self.hex(bytes))") { try CBOR(decoding: bytes) }
        }
        // Random bytes: an error or a value, never a crash.
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<5_000 {
            let bytes = (0..<Int.random(in: 0..<40, using: &generator)).map { _ in
                UInt8.random(in: 0...255, using: &generator)
            }
            _ = try? CBOR(decoding: bytes)
        }
    }
}

extension String {
    fileprivate var leftPadded: String { count == 1 ? "0" + self : self }
}

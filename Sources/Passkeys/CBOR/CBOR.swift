/// CBOR (RFC 8949) as CTAP 2.1 uses it: integers, byte and text strings, arrays, maps, booleans
/// and null, written in CTAP2's canonical form (shortest lengths, definite lengths, map keys
/// sorted by their encodings: shorter first, then bytewise) and read defensively: every length is
/// checked against what is left before anything is allocated, nesting is bounded, duplicate map
/// keys, indefinite lengths, tags, floats and trailing bytes are refused (CTAP 2.1 §8).
package indirect enum CBOR: Hashable, Sendable {
    case unsigned(UInt64)
    /// -1 - n.
    case negative(UInt64)
    case bytes([UInt8])
    case text(String)
    case array([CBOR])
    case map([CBOR: CBOR])
    case bool(Bool)
    case null

    package struct Malformed: Error, CustomStringConvertible, Equatable {
        package let description: String
        init(_ description: String) { self.description = description }
    }

    /// The deepest nesting read: CTAP's messages nest 4 deep at most (an extension's map in a
    /// request map); more is an attack on the reader's stack.
    package static let depthLimit = 8

    /// An integer, as CBOR writes it.
    package static func int(_ value: Int64) -> CBOR {
        value >= 0 ? .unsigned(UInt64(value)) : .negative(UInt64(-1 - value))
    }

    // MARK: Reading values

    package var int: Int64? {
        switch self {
        case .unsigned(let value): value <= UInt64(Int64.max) ? Int64(value) : nil
        case .negative(let value): value <= UInt64(Int64.max) ? -1 - Int64(value) : nil
        default: nil
        }
    }

    package var bytesValue: [UInt8]? { if case .bytes(let value) = self { value } else { nil } }
    package var textValue: String? { if case .text(let value) = self { value } else { nil } }
    package var arrayValue: [CBOR]? { if case .array(let value) = self { value } else { nil } }
    package var mapValue: [CBOR: CBOR]? { if case .map(let value) = self { value } else { nil } }
    package var boolValue: Bool? { if case .bool(let value) = self { value } else { nil } }

    package subscript(key: Int64) -> CBOR? { mapValue?[.int(key)] }
    package subscript(key: String) -> CBOR? { mapValue?[.text(key)] }

    // MARK: Writing

    /// The canonical encoding.
    package func encoded() -> [UInt8] {
        var output: [UInt8] = []
        encode(into: &output)
        return output
    }

    private func encode(into output: inout [UInt8]) {
        switch self {
        case .unsigned(let value): Self.head(0, value, &output)
        case .negative(let value): Self.head(1, value, &output)
        case .bytes(let value):
            Self.head(2, UInt64(value.count), &output)
            output += value
        case .text(let value):
            let utf8 = Array(value.utf8)
            Self.head(3, UInt64(utf8.count), &output)
            output += utf8
        case .array(let values):
            Self.head(4, UInt64(values.count), &output)
            for value in values { value.encode(into: &output) }
        case .map(let entries):
            Self.head(5, UInt64(entries.count), &output)
            let encoded = entries.map { (key: $0.key.encoded(), value: $0.value) }.sorted {
                $0.key.count != $1.key.count
                    ? $0.key.count < $1.key.count : $0.key.lexicographicallyPrecedes($1.key)
            }
            for entry in encoded {
                output += entry.key
                entry.value.encode(into: &output)
            }
        case .bool(let value): output.append(value ? 0xF5 : 0xF4)
        case .null: output.append(0xF6)
        }
    }

    private static func head(_ major: UInt8, _ value: UInt64, _ output: inout [UInt8]) {
        let type = major << 5
        switch value {
        case 0..<24: output.append(type | UInt8(value))
        case 24...0xFF: output += [type | 24, UInt8(value)]
        case 0x100...0xFFFF: output += [type | 25, UInt8(value >> 8), UInt8(value & 0xFF)]
        case 0x1_0000...0xFFFF_FFFF:
            output.append(type | 26)
            for shift in stride(from: 24, through: 0, by: -8) { output.append(UInt8((value >> UInt64(shift)) & 0xFF)) }
        default:
            output.append(type | 27)
            for shift in stride(from: 56, through: 0, by: -8) { output.append(UInt8((value >> UInt64(shift)) & 0xFF)) }
        }
    }

    // MARK: Reading

    /// The one value `bytes` encodes; trailing bytes are refused.
    package init(decoding bytes: ArraySlice<UInt8>) throws(Malformed) {
        var reader = Reader(bytes: bytes)
        self = try reader.value(depth: 0)
        guard reader.position == bytes.endIndex else {
            throw Malformed("\(bytes.endIndex - reader.position) bytes after the CBOR value")
        }
    }

    package init(decoding bytes: [UInt8]) throws(Malformed) {
        try self.init(decoding: bytes[...])
    }

    private struct Reader {
        let bytes: ArraySlice<UInt8>
        var position: Int

        init(bytes: ArraySlice<UInt8>) {
            self.bytes = bytes
            position = bytes.startIndex
        }

        var remaining: Int { bytes.endIndex - position }

        mutating func byte() throws(Malformed) -> UInt8 {
            guard position < bytes.endIndex else { throw Malformed("the CBOR value ends early") }
            defer { position += 1 }
            return bytes[position]
        }

        mutating func take(_ count: UInt64) throws(Malformed) -> ArraySlice<UInt8> {
            guard count <= UInt64(remaining) else { throw Malformed("a CBOR string is longer than the message") }
            defer { position += Int(count) }
            return bytes[position..<position + Int(count)]
        }

        mutating func argument(_ info: UInt8) throws(Malformed) -> UInt64 {
            switch info {
            case 0..<24: return UInt64(info)
            case 24...27:
                var value: UInt64 = 0
                for _ in 0..<(1 << (info - 24)) { value = value << 8 | UInt64(try byte()) }
                return value
            default: throw Malformed("indefinite lengths and reserved values are not CTAP2 CBOR")
            }
        }

        mutating func value(depth: Int) throws(Malformed) -> CBOR {
            guard depth <= CBOR.depthLimit else { throw Malformed("CBOR nested deeper than \(CBOR.depthLimit)") }
            let initial = try byte()
            let major = initial >> 5
            let info = initial & 0x1F
            if major == 7 {
                switch info {
                case 20: return .bool(false)
                case 21: return .bool(true)
                case 22: return .null
                default: throw Malformed("CBOR simple value or float \(info) is not used by CTAP2")
                }
            }
            let argument = try argument(info)
            switch major {
            case 0: return .unsigned(argument)
            case 1: return .negative(argument)
            case 2: return .bytes(Array(try take(argument)))
            case 3:
                guard let text = String(validating: try take(argument), as: UTF8.self) else {
                    throw Malformed("a CBOR text string is not UTF-8")
                }
                return .text(text)
            case 4:
                // Each element takes at least a byte: a count beyond what is left is a lie.
                guard argument <= UInt64(remaining) else { throw Malformed("a CBOR array is longer than the message") }
                var values: [CBOR] = []
                values.reserveCapacity(Int(argument))
                for _ in 0..<argument { values.append(try value(depth: depth + 1)) }
                return .array(values)
            case 5:
                guard argument <= UInt64(remaining / 2) else {
                    throw Malformed("a CBOR map is longer than the message")
                }
                var entries: [CBOR: CBOR] = [:]
                for _ in 0..<argument {
                    let key = try value(depth: depth + 1)
                    let entry = try value(depth: depth + 1)
                    guard entries.updateValue(entry, forKey: key) == nil else {
                        throw Malformed("a CBOR map repeats a key")
                    }
                }
                return .map(entries)
            default:
                throw Malformed("CBOR tags are not used by CTAP2")
            }
        }
    }
}

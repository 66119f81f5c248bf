/// GLib's GVariant serialization in normal form, little-endian, for the types libsecret's keyring
/// file uses (``PortalKeyring``): bytes, 32- and 64-bit unsigned integers, strings, arrays,
/// tuples and dictionary entries. Written to be read by GLib; read defensively, since a file is
/// input: every offset is checked against its container, and a value that does not fit its type
/// is a ``GVariant/Malformed`` error, never a crash.
///
/// The rules (GVariant's serialization specification): a value of fixed size is its bytes; a
/// container aligns each child to the child's alignment, counted from the container's start; a
/// tuple ends with the end offsets of its variable-size children but the last, in reverse order;
/// an array of variable-size elements ends with every element's end offset, in order; an
/// offset's width is the smallest of 1, 2, 4 and 8 bytes that can address the whole container.
indirect enum GVariantType: Equatable, Sendable {
    case byte, uint32, uint64, string
    case array(GVariantType)
    case tuple([GVariantType])
    case dictionaryEntry(GVariantType, GVariantType)

    var alignment: Int {
        switch self {
        case .byte, .string: 1
        case .uint32: 4
        case .uint64: 8
        case .array(let element): element.alignment
        case .tuple(let members): members.map(\.alignment).max() ?? 1
        case .dictionaryEntry(let key, let value): max(key.alignment, value.alignment)
        }
    }

    /// The size of every value of the type, or nil for a type whose values vary in size. Tuples
    /// of fixed-size members are not used by libsecret's file and are treated as variable.
    var fixedSize: Int? {
        switch self {
        case .byte: 1
        case .uint32: 4
        case .uint64: 8
        case .string, .array, .tuple, .dictionaryEntry: nil
        }
    }
}

indirect enum GVariant: Equatable, Sendable {
    case byte(UInt8)
    case uint32(UInt32)
    case uint64(UInt64)
    case string(String)
    /// An `ay`, kept as its bytes.
    case bytes([UInt8])
    case array([GVariant])
    case tuple([GVariant])
    case dictionaryEntry(GVariant, GVariant)

    struct Malformed: Error, CustomStringConvertible {
        let description: String
    }

    // MARK: Writing

    /// The value's serialization as a value of `type`.
    func serialized(as type: GVariantType) throws(Malformed) -> [UInt8] {
        switch (self, type) {
        case (.byte(let value), .byte): return [value]
        case (.uint32(let value), .uint32): return withUnsafeBytes(of: value.littleEndian, Array.init)
        case (.uint64(let value), .uint64): return withUnsafeBytes(of: value.littleEndian, Array.init)
        case (.string(let value), .string):
            let bytes = Array(value.utf8)
            guard !bytes.contains(0) else { throw Malformed(description: "a GVariant string has no NUL inside") }
            return bytes + [0]
        case (.bytes(let value), .array(.byte)): return value
        case (.array(let elements), .array(let element)):
            if element.fixedSize != nil {
                var body: [UInt8] = []
                for value in elements { body += try value.serialized(as: element) }
                return body
            }
            var body: [UInt8] = []
            var ends: [Int] = []
            for value in elements {
                Self.pad(&body, to: element.alignment)
                body += try value.serialized(as: element)
                ends.append(body.count)
            }
            return Self.framed(body, offsets: ends)
        case (.tuple(let values), .tuple(let members)):
            guard values.count == members.count else {
                throw Malformed(description: "a tuple of \(members.count) members was given \(values.count) values")
            }
            return try Self.serializeMembers(values, members)
        case (.dictionaryEntry(let key, let value), .dictionaryEntry(let keyType, let valueType)):
            return try Self.serializeMembers([key, value], [keyType, valueType])
        default:
            throw Malformed(description: "a value does not have the GVariant type it is written as")
        }
    }

    private static func serializeMembers(_ values: [GVariant], _ members: [GVariantType]) throws(Malformed) -> [UInt8] {
        var body: [UInt8] = []
        var ends: [Int] = []
        for (index, (value, member)) in zip(values, members).enumerated() {
            pad(&body, to: member.alignment)
            body += try value.serialized(as: member)
            if member.fixedSize == nil, index < members.count - 1 { ends.append(body.count) }
        }
        return framed(body, offsets: ends.reversed())
    }

    private static func pad(_ body: inout [UInt8], to alignment: Int) {
        while body.count % alignment != 0 { body.append(0) }
    }

    /// `body` followed by `offsets`, each in the smallest width that addresses the result.
    private static func framed(_ body: [UInt8], offsets: [Int]) -> [UInt8] {
        guard !offsets.isEmpty else { return body }
        var width = 1
        while width < 8, body.count + offsets.count * width > (1 << (8 * width)) - 1 { width *= 2 }
        var result = body
        for offset in offsets {
            for shift in 0..<width { result.append(UInt8(truncatingIfNeeded: UInt64(offset) >> (8 * shift))) }
        }
        return result
    }

    // MARK: Reading

    /// The value of `type` that `data` serializes.
    init(_ data: ArraySlice<UInt8>, as type: GVariantType) throws(Malformed) {
        let data = ArraySlice(Array(data))
        switch type {
        case .byte:
            guard data.count == 1 else { throw Malformed(description: "a byte is 1 byte, not \(data.count)") }
            self = .byte(data[data.startIndex])
        case .uint32:
            guard data.count == 4 else { throw Malformed(description: "a uint32 is 4 bytes, not \(data.count)") }
            self = .uint32(data.reversed().reduce(0) { $0 << 8 | UInt32($1) })
        case .uint64:
            guard data.count == 8 else { throw Malformed(description: "a uint64 is 8 bytes, not \(data.count)") }
            self = .uint64(data.reversed().reduce(0) { $0 << 8 | UInt64($1) })
        case .string:
            guard data.last == 0, !data.dropLast().contains(0),
                let text = String(validating: data.dropLast(), as: UTF8.self)
            else { throw Malformed(description: "a string is UTF-8 ending in its only NUL") }
            self = .string(text)
        case .array(.byte):
            self = .bytes(Array(data))
        case .array(let element):
            if let size = element.fixedSize {
                guard data.count % size == 0 else {
                    throw Malformed(description: "an array of \(size)-byte elements has \(data.count) bytes")
                }
                var values: [GVariant] = []
                for start in stride(from: 0, to: data.count, by: size) {
                    values.append(try GVariant(data[start..<start + size], as: element))
                }
                self = .array(values)
                return
            }
            guard !data.isEmpty else {
                self = .array([])
                return
            }
            let width = Self.offsetWidth(data.count)
            let tableStart = try Self.offset(in: data, at: data.count - width, width: width)
            guard tableStart <= data.count - width, (data.count - tableStart) % width == 0 else {
                throw Malformed(description: "an array's offsets do not fit it")
            }
            var values: [GVariant] = []
            var start = 0
            for position in stride(from: tableStart, to: data.count, by: width) {
                let end = try Self.offset(in: data, at: position, width: width)
                start = Self.aligned(start, element.alignment)
                guard start <= end, end <= tableStart else {
                    throw Malformed(description: "an array element lies outside its array")
                }
                values.append(try GVariant(data[start..<end], as: element))
                start = end
            }
            self = .array(values)
        case .tuple(let members):
            self = .tuple(try Self.members(of: data, members))
        case .dictionaryEntry(let key, let value):
            let both = try Self.members(of: data, [key, value])
            self = .dictionaryEntry(both[0], both[1])
        }
    }

    private static func members(of data: ArraySlice<UInt8>, _ members: [GVariantType]) throws(Malformed) -> [GVariant] {
        let width = offsetWidth(data.count)
        var offsetsRead = 0
        var start = 0
        var values: [GVariant] = []
        for (index, member) in members.enumerated() {
            start = aligned(start, member.alignment)
            let end: Int
            if let size = member.fixedSize {
                end = start + size
            } else if index < members.count - 1 {
                offsetsRead += 1
                end = try offset(in: data, at: data.count - offsetsRead * width, width: width)
            } else {
                end = data.count - offsetsRead * width
            }
            guard start <= end, end <= data.count - offsetsRead * width else {
                throw Malformed(description: "a tuple member lies outside its tuple")
            }
            values.append(try GVariant(data[start..<end], as: member))
            start = end
        }
        return values
    }

    private static func offsetWidth(_ size: Int) -> Int {
        size > Int(UInt32.max) ? 8 : size > Int(UInt16.max) ? 4 : size > Int(UInt8.max) ? 2 : 1
    }

    private static func offset(in data: ArraySlice<UInt8>, at position: Int, width: Int) throws(Malformed) -> Int {
        guard position >= 0, position + width <= data.count else {
            throw Malformed(description: "a framing offset lies outside its container")
        }
        var value: UInt64 = 0
        for index in (0..<width).reversed() { value = value << 8 | UInt64(data[data.startIndex + position + index]) }
        guard value <= UInt64(data.count) else {
            throw Malformed(description: "a framing offset points past its container")
        }
        return Int(value)
    }

    private static func aligned(_ position: Int, _ alignment: Int) -> Int {
        (position + alignment - 1) / alignment * alignment
    }
}

extension GVariant {
    var uint32Value: UInt32? { if case .uint32(let value) = self { value } else { nil } }
    var uint64Value: UInt64? { if case .uint64(let value) = self { value } else { nil } }
    var stringValue: String? { if case .string(let value) = self { value } else { nil } }
    var bytesValue: [UInt8]? { if case .bytes(let value) = self { value } else { nil } }
    var elements: [GVariant]? {
        switch self {
        case .array(let values), .tuple(let values): values
        default: nil
        }
    }
}

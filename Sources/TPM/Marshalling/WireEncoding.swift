import SystemCalls

/// TPM 2.0 Part 2 canonical encoding: big-endian integers, TPM2B = UINT16 size + bytes.
///
/// Templates and policy inputs are built here, in Swift, so that the same bytes feed the
/// TPM (through Tss2_MU unmarshalling) and the digests this layer computes itself.
package struct WireWriter {
    package init() {}
    package private(set) var bytes: [UInt8] = []

    package mutating func append(_ value: UInt8) { bytes.append(value) }
    package mutating func append(_ value: UInt16) { BigEndian.append(value, to: &bytes) }
    package mutating func append(_ value: UInt32) { BigEndian.append(value, to: &bytes) }
    package mutating func append(_ value: UInt64) { BigEndian.append(value, to: &bytes) }
    package mutating func append(raw: some Sequence<UInt8>) { bytes.append(contentsOf: raw) }
    /// A TPM2B: UINT16 size followed by the bytes.
    package mutating func appendSized(_ raw: [UInt8]) {
        append(UInt16(raw.count))
        bytes.append(contentsOf: raw)
    }
}

/// Reads the encoding back, checking every length against what remains before using it.
package struct WireReader {
    private let bytes: [UInt8]
    package private(set) var offset = 0

    package init(_ bytes: [UInt8]) { self.bytes = bytes }

    package var remaining: Int { bytes.count - offset }

    package mutating func readUInt8() throws(TPMError) -> UInt8 {
        try need(1)
        defer { offset += 1 }
        return bytes[offset]
    }
    package mutating func readUInt16() throws(TPMError) -> UInt16 { try readInteger() }
    package mutating func readUInt32() throws(TPMError) -> UInt32 { try readInteger() }
    package mutating func readUInt64() throws(TPMError) -> UInt64 { try readInteger() }

    private mutating func readInteger<T: FixedWidthInteger>() throws(TPMError) -> T {
        let size = T.bitWidth / 8
        try need(size)
        defer { offset += size }
        return BigEndian.integer(bytes[offset..<offset + size])
    }
    package mutating func readBytes(_ count: Int) throws(TPMError) -> [UInt8] { try take(count) }
    package mutating func readSized(maximum: Int) throws(TPMError) -> [UInt8] {
        let count = Int(try readUInt16())
        guard count <= maximum else {
            throw TPMError(.malformedData, "A size field (\(count)) exceeds its limit (\(maximum))")
        }
        return try readBytes(count)
    }

    /// The next `count` bytes as a zero-based array.
    private mutating func take(_ count: Int) throws(TPMError) -> [UInt8] {
        try need(count)
        defer { offset += count }
        return Array(bytes[offset..<offset + count])
    }

    /// Integers are read in place; only byte strings are copied out.
    private func need(_ count: Int) throws(TPMError) {
        guard count >= 0, count <= remaining else {
            throw TPMError(.malformedData, "Data ends \(count - remaining) bytes early")
        }
    }
}

extension Collection<UInt8> {
    /// Lower-case hexadecimal: the one hex encoder of every target (names on disk, digests in
    /// messages, fixtures). Table-driven, since file names are computed on the get path.
    package var hexString: String {
        let digits: [UInt8] = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(count * 2)
        for byte in self {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: text, as: UTF8.self)
    }
}

extension Array where Element == UInt8 {
    /// Parses lower- or upper-case hexadecimal; nil for odd lengths or other characters.
    package init?(hexString: String) {
        let characters = Array(hexString.utf8)
        guard characters.count.isMultiple(of: 2) else { return nil }
        var result: [UInt8] = []
        result.reserveCapacity(characters.count / 2)
        var index = 0
        while index < characters.count {
            guard let high = Self.nibble(characters[index]), let low = Self.nibble(characters[index + 1]) else { return nil }
            result.append(high << 4 | low)
            index += 2
        }
        self = result
    }

    private static func nibble(_ character: UInt8) -> UInt8? {
        switch character {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): character - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): character - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): character - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}



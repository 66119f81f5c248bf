/// Bytes that end before a field they should hold, or a size field over its limit: the one error
/// of reading any TPMKeychain encoding. Each parser says what it was reading (a TPM structure
/// is malformed data, a store file is tampered with).
package struct WireFormatError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What was wrong, for logs and the parser's own message.
    package let message: String

    package init(_ message: String) { self.message = message }

    package var description: String { message }
}

/// TPM 2.0 Part 2 canonical encoding, which every TPMKeychain format uses too: big-endian
/// integers, TPM2B = UINT16 size + bytes.
///
/// TPM templates and policy inputs are built with it, in Swift, so that the same bytes feed the
/// TPM (through Tss2_MU unmarshalling) and the digests the TPM layer computes itself.
package struct WireWriter {
    package init() {}
    package private(set) var bytes: [UInt8] = []

    package mutating func append(_ value: UInt8) { bytes.append(value) }
    package mutating func append(_ value: UInt16) { BigEndian.append(value, to: &bytes) }
    package mutating func append(_ value: UInt32) { BigEndian.append(value, to: &bytes) }
    package mutating func append(_ value: UInt64) { BigEndian.append(value, to: &bytes) }
    package mutating func append(raw: some Sequence<UInt8>) { bytes.append(contentsOf: raw) }
    // Arrays and slices, the common case, without the generic append's per-element path: the
    // generic one is not specialized for callers in other modules (an item write's header was
    // measurably slower through it).
    package mutating func append(raw: [UInt8]) { bytes.append(contentsOf: raw) }
    package mutating func append(raw: ArraySlice<UInt8>) { bytes.append(contentsOf: raw) }
    package mutating func reserveCapacity(_ count: Int) { bytes.reserveCapacity(count) }
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

    package mutating func readUInt8() throws(WireFormatError) -> UInt8 {
        try need(1)
        defer { offset += 1 }
        return bytes[offset]
    }
    package mutating func readUInt16() throws(WireFormatError) -> UInt16 { try readInteger() }
    package mutating func readUInt32() throws(WireFormatError) -> UInt32 { try readInteger() }
    package mutating func readUInt64() throws(WireFormatError) -> UInt64 { try readInteger() }

    private mutating func readInteger<T: FixedWidthInteger>() throws(WireFormatError) -> T {
        let size = T.bitWidth / 8
        try need(size)
        defer { offset += size }
        return BigEndian.integer(bytes[offset..<offset + size])
    }
    package mutating func readBytes(_ count: Int) throws(WireFormatError) -> [UInt8] { try take(count) }
    package mutating func readSized(maximum: Int) throws(WireFormatError) -> [UInt8] {
        let count = Int(try readUInt16())
        guard count <= maximum else {
            throw WireFormatError("A size field (\(count)) exceeds its limit (\(maximum))")
        }
        return try readBytes(count)
    }

    /// The next `count` bytes as a zero-based array.
    private mutating func take(_ count: Int) throws(WireFormatError) -> [UInt8] {
        try need(count)
        defer { offset += count }
        return Array(bytes[offset..<offset + count])
    }

    /// Integers are read in place; only byte strings are copied out.
    private func need(_ count: Int) throws(WireFormatError) {
        guard count >= 0, count <= remaining else {
            throw WireFormatError("Data ends \(count - remaining) bytes early")
        }
    }
}

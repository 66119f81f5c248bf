/// The one big-endian integer codec of every target (TPM wire format, store formats, swtpm's
/// channels): the TPM's canonical byte order, which every TPMKeychain format uses too.
///
/// Inlinable, so each caller gets a version specialised for its integer and collection types: the
/// generic one (metadata lookups, witness calls per byte) was a sixth of a SecItem lookup.
package enum BigEndian {
    /// `value` as `T.bitWidth / 8` bytes, most significant first.
    @inlinable package static func bytes<T: FixedWidthInteger>(_ value: T) -> [UInt8] {
        var result: [UInt8] = []
        append(value, to: &result)
        return result
    }

    /// Appends `value`'s bytes, most significant first.
    @inlinable package static func append<T: FixedWidthInteger>(_ value: T, to bytes: inout [UInt8]) {
        var shift = T.bitWidth - 8
        while shift >= 0 {
            bytes.append(UInt8(truncatingIfNeeded: value >> shift))
            shift -= 8
        }
    }

    /// The integer the bytes encode, most significant first; the caller checked there are exactly
    /// `T.bitWidth / 8` of them (fewer read as a smaller number, more overflow into the high bits).
    @inlinable package static func integer<T: FixedWidthInteger>(_ bytes: some Sequence<UInt8>, as type: T.Type = T.self) -> T {
        bytes.reduce(T.zero) { $0 << 8 | T($1) }
    }
}

/// The one big-endian integer codec of every target (TPM wire format, store formats, swtpm's
/// channels): the TPM's canonical byte order, which every TPMKeychain format uses too.
///
/// Inlinable, so each caller gets a version specialised for its integer and collection types: the
/// generic one (metadata lookups, witness calls per byte) was a sixth of a SecItem lookup.
/// `public` for that (its members stay `package`): see `Locked` in SystemCalls; an `@inlinable`
/// member of a `package` type is not inlined into other modules. WireFormat is no product.
public enum BigEndian {
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

    // Concrete overloads for the widths the formats use. They were added when a profile of a get
    // showed the generic `append` called unspecialised from other modules (KeychainVocabulary's
    // primary-key encoding); the cause was that `BigEndian` was a `package` type, whose
    // `@inlinable` members other modules do not inline. Now that it is public the generic one is
    // specialised too; these stay as the plain form for the widths every format writes.

    @inlinable package static func append(_ value: UInt16, to bytes: inout [UInt8]) {
        bytes.append(UInt8(truncatingIfNeeded: value >> 8))
        bytes.append(UInt8(truncatingIfNeeded: value))
    }

    @inlinable package static func append(_ value: UInt32, to bytes: inout [UInt8]) {
        bytes.append(UInt8(truncatingIfNeeded: value >> 24))
        bytes.append(UInt8(truncatingIfNeeded: value >> 16))
        bytes.append(UInt8(truncatingIfNeeded: value >> 8))
        bytes.append(UInt8(truncatingIfNeeded: value))
    }

    @inlinable package static func append(_ value: UInt64, to bytes: inout [UInt8]) {
        append(UInt32(truncatingIfNeeded: value >> 32), to: &bytes)
        append(UInt32(truncatingIfNeeded: value), to: &bytes)
    }

    /// The integer the bytes encode, most significant first; the caller checked there are exactly
    /// `T.bitWidth / 8` of them (fewer read as a smaller number, more overflow into the high bits).
    @inlinable package static func integer<T: FixedWidthInteger>(
        _ bytes: some Sequence<UInt8>, as type: T.Type = T.self
    ) -> T {
        bytes.reduce(T.zero) { $0 << 8 | T($1) }
    }

    /// The same, for the store's and the TPM's own buffers (arrays and slices of them, at most
    /// 8 bytes): a loop over the bytes that needs no specialisation. The optimizer did not
    /// specialise the generic one at these call sites (`perf` found it running through witness
    /// tables and metadata lookups in every get, about a third of a get's own time).
    @inlinable package static func integer<T: FixedWidthInteger>(
        _ bytes: ArraySlice<UInt8>, as type: T.Type = T.self
    ) -> T {
        T(truncatingIfNeeded: bits(bytes))
    }

    @inlinable package static func integer<T: FixedWidthInteger>(_ bytes: [UInt8], as type: T.Type = T.self) -> T {
        T(truncatingIfNeeded: bits(bytes[...]))
    }

    /// The same, for bytes read in place (an attribute's value where its list holds it).
    @inlinable package static func integer<T: FixedWidthInteger>(
        _ bytes: UnsafeBufferPointer<UInt8>, as type: T.Type = T.self
    ) -> T {
        var value: UInt64 = 0
        for byte in bytes { value = value << 8 | UInt64(byte) }
        return T(truncatingIfNeeded: value)
    }

    @inlinable static func bits(_ bytes: ArraySlice<UInt8>) -> UInt64 {
        var value: UInt64 = 0
        for byte in bytes { value = value << 8 | UInt64(byte) }
        return value
    }
}

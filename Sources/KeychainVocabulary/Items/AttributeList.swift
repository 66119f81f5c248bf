import WireFormat

/// The attributes section of a format-2 item, as tagged values: (tag UINT32, length UINT32,
/// value) repeated, tags strictly ascending, so that every writer produces the same bytes and no
/// tag appears twice (docs/FORMAT.md, "Attributes, format 2").
///
/// A tag this build does not know is kept as bytes and written back unchanged, so adding an
/// attribute never changes the format and an older build never drops a newer one's data.
/// Clearing an attribute removes its entry; an absent attribute and an empty one differ.
package struct AttributeList: Sendable, Hashable {
    /// Every value's ceiling; the whole section is bounded by the item file's limits too.
    package static let maximumValueSize = 64 << 10

    /// The section as stored: (tag UINT32, length UINT32, value) repeated in ascending tag
    /// order. Kept as one buffer: a decoding adopts it whole, an encoding hands it back as it
    /// is, and a listing of thousands reads each item's values from one allocation rather than
    /// one per value (each a cache miss there). An item has a dozen attributes or so: walking
    /// their headers finds one as fast as a search would. Canonical bytes make equal lists equal
    /// buffers, so equality and hashing are the buffer's.
    private var bytes: [UInt8] = []

    /// A decoded entry's place in ``bytes``.
    private struct Entry {
        let tag: FourCharacterCode
        /// From the entry's header to the end of its value.
        let range: Range<Int>
        var value: Range<Int> { range.lowerBound + 8..<range.upperBound }
    }

    package init() {}

    /// The attributes a section holds, or why it is not one a writer produced: a truncated
    /// entry, a value over ``maximumValueSize``, or tags out of order or repeated.
    package init(section: [UInt8]) throws(SectionDamage) {
        var offset = 0
        var previous: FourCharacterCode?
        while offset < section.count {
            guard section.count - offset >= 8 else { throw .truncated }
            let tag = FourCharacterCode(rawValue: BigEndian.integer(section[offset..<offset + 4], as: UInt32.self))
            let count = Int(BigEndian.integer(section[offset + 4..<offset + 8], as: UInt32.self))
            guard count <= Self.maximumValueSize else { throw .oversized(tag, count) }
            if let previous, tag <= previous { throw .outOfOrder }
            guard section.count - offset - 8 >= count else { throw .truncated }
            previous = tag
            offset += 8 + count
        }
        bytes = section
    }

    /// What makes bytes no attributes section: ``init(section:)``.
    package enum SectionDamage: Error {
        case truncated
        case oversized(FourCharacterCode, Int)
        case outOfOrder
    }

    package var tags: [FourCharacterCode] {
        var tags: [FourCharacterCode] = []
        var offset = 0
        while let entry = entry(at: offset) {
            tags.append(entry.tag)
            offset = entry.range.upperBound
        }
        return tags
    }

    package subscript(tag: FourCharacterCode) -> [UInt8]? {
        get {
            let (entry, _) = find(tag)
            return entry.map { Array(bytes[$0.value]) }
        }
        set {
            let (entry, insertion) = find(tag)
            var replacement: [UInt8] = []
            if let newValue {
                replacement.reserveCapacity(8 + newValue.count)
                BigEndian.append(tag.rawValue, to: &replacement)
                BigEndian.append(UInt32(newValue.count), to: &replacement)
                replacement.append(contentsOf: newValue)
            }
            bytes.replaceSubrange(entry?.range ?? insertion..<insertion, with: replacement)
        }
    }

    /// The entry of `tag`, or nil and where it would be inserted.
    private func find(_ tag: FourCharacterCode) -> (entry: Entry?, insertion: Int) {
        var offset = 0
        while let entry = entry(at: offset) {
            if entry.tag == tag { return (entry, offset) }
            if entry.tag > tag { break }
            offset = entry.range.upperBound
        }
        return (nil, offset)
    }

    /// The entry starting at `offset`, nil at the end. The buffer is well formed: ``init(section:)``
    /// checked one adopted whole, and the setter writes only whole entries.
    private func entry(at offset: Int) -> Entry? {
        guard offset < bytes.count else { return nil }
        let count = Int(BigEndian.integer(bytes[offset + 4..<offset + 8], as: UInt32.self))
        return Entry(
            tag: FourCharacterCode(rawValue: BigEndian.integer(bytes[offset..<offset + 4], as: UInt32.self)),
            range: offset..<offset + 8 + count)
    }

    /// `body` over the bytes of `tag`'s value, read in place, or nil when it is absent. The typed
    /// readers go through here: a listing reads a dozen values per item, and handing each out as
    /// an array would allocate it.
    private func withValue<R>(_ tag: FourCharacterCode, _ body: (UnsafeBufferPointer<UInt8>) -> R?) -> R? {
        guard let entry = find(tag).entry else { return nil }
        return bytes.withUnsafeBufferPointer { body(UnsafeBufferPointer(rebasing: $0[entry.value])) }
    }

    /// Whether `tag` holds exactly `bytes` (both absent counts as equal), compared in place.
    package func value(_ tag: FourCharacterCode, equals other: [UInt8]?) -> Bool {
        guard let other else { return find(tag).entry == nil }
        return withValue(tag) { value in
            other.withUnsafeBufferPointer { value.count == $0.count && value.elementsEqual($0) }
        } ?? false
    }

    // MARK: Typed values

    /// UTF-8 text.
    package func string(_ tag: FourCharacterCode) -> String? {
        // From the contiguous bytes, and ASCII without validation: a listing makes several
        // strings per item, the generic collection path is slower per string, and the validating
        // initialiser looks its encoding's metadata up at run time where decoding is specialised.
        withValue(tag) { bytes in
            bytes.allSatisfy { $0 < 0x80 }
                ? String(decoding: bytes, as: UTF8.self) : String(validating: bytes, as: UTF8.self)
        }
    }

    package mutating func setString(_ text: String?, for tag: FourCharacterCode) {
        self[tag] = text.map { Array($0.utf8) }
    }

    /// A big-endian UINT32: a port, or a four-character code (protocol, authentication type).
    package func uint32(_ tag: FourCharacterCode) -> UInt32? {
        withValue(tag) { $0.count == 4 ? BigEndian.integer($0, as: UInt32.self) : nil }
    }

    package mutating func setUInt32(_ value: UInt32?, for tag: FourCharacterCode) {
        self[tag] = value.map { BigEndian.bytes($0) }
    }

    /// One byte, 0 or 1.
    package func bool(_ tag: FourCharacterCode) -> Bool? {
        withValue(tag) { $0.count == 1 && $0[0] <= 1 ? $0[0] == 1 : nil }
    }

    package mutating func setBool(_ value: Bool?, for tag: FourCharacterCode) {
        self[tag] = value.map { [$0 ? 1 : 0] }
    }

    /// A big-endian INT64 of nanoseconds since 1970-01-01T00:00:00Z: fine enough that items
    /// created in a burst still list in creation order.
    package func nanoseconds(_ tag: FourCharacterCode) -> Int64? {
        withValue(tag) { $0.count == 8 ? BigEndian.integer($0, as: Int64.self) : nil }
    }

    package mutating func setNanoseconds(_ value: Int64?, for tag: FourCharacterCode) {
        self[tag] = value.map { BigEndian.bytes($0) }
    }

    // MARK: Bytes

    /// The section's plaintext: entries in ascending tag order.
    package func encoded() -> [UInt8] { bytes }
}

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

    /// The entries in ascending tag order, as the section stores them. An item has a dozen
    /// attributes or so: a binary search over 32-bit tags finds one faster than hashing the tag
    /// would, and a decoding appends in order without growing a table.
    private var entries: [Entry] = []

    private struct Entry: Sendable, Hashable {
        let tag: FourCharacterCode
        var value: [UInt8]
    }

    package init() {}

    /// An empty list with room for `count` attributes, so that decoding one grows no storage.
    package init(minimumCapacity count: Int) {
        entries.reserveCapacity(count)
    }

    package var tags: [FourCharacterCode] { entries.map(\.tag) }

    package subscript(tag: FourCharacterCode) -> [UInt8]? {
        get {
            let (index, found) = position(of: tag)
            return found ? entries[index].value : nil
        }
        set {
            // Decoding and most building append in tag order: no search.
            if let newValue, entries.last.map({ $0.tag < tag }) ?? true {
                entries.append(Entry(tag: tag, value: newValue))
                return
            }
            let (index, found) = position(of: tag)
            switch (newValue, found) {
            case (let value?, true): entries[index].value = value
            case (let value?, false): entries.insert(Entry(tag: tag, value: value), at: index)
            case (nil, true): entries.remove(at: index)
            case (nil, false): break
            }
        }
    }

    /// Where `tag` is, or would be inserted, in `entries`.
    private func position(of tag: FourCharacterCode) -> (index: Int, found: Bool) {
        var low = 0
        var high = entries.count
        while low < high {
            let middle = (low + high) / 2
            let candidate = entries[middle].tag
            if candidate == tag { return (middle, true) }
            if candidate < tag { low = middle + 1 } else { high = middle }
        }
        return (low, false)
    }

    // MARK: Typed values

    /// UTF-8 text.
    package func string(_ tag: FourCharacterCode) -> String? {
        // Validated from the contiguous bytes: the generic collection path is slower per string,
        // and a listing makes several per item.
        self[tag]?.withUnsafeBufferPointer { String(validating: $0, as: UTF8.self) }
    }

    package mutating func setString(_ text: String?, for tag: FourCharacterCode) {
        self[tag] = text.map { Array($0.utf8) }
    }

    /// A big-endian UINT32: a port, or a four-character code (protocol, authentication type).
    package func uint32(_ tag: FourCharacterCode) -> UInt32? {
        guard let bytes = self[tag], bytes.count == 4 else { return nil }
        return BigEndian.integer(bytes)
    }

    package mutating func setUInt32(_ value: UInt32?, for tag: FourCharacterCode) {
        self[tag] = value.map { BigEndian.bytes($0) }
    }

    /// One byte, 0 or 1.
    package func bool(_ tag: FourCharacterCode) -> Bool? {
        guard let bytes = self[tag], bytes.count == 1, bytes[0] <= 1 else { return nil }
        return bytes[0] == 1
    }

    package mutating func setBool(_ value: Bool?, for tag: FourCharacterCode) {
        self[tag] = value.map { [$0 ? 1 : 0] }
    }

    /// A big-endian INT64 of nanoseconds since 1970-01-01T00:00:00Z: fine enough that items
    /// created in a burst still list in creation order.
    package func nanoseconds(_ tag: FourCharacterCode) -> Int64? {
        guard let bytes = self[tag], bytes.count == 8 else { return nil }
        return BigEndian.integer(bytes)
    }

    package mutating func setNanoseconds(_ value: Int64?, for tag: FourCharacterCode) {
        self[tag] = value.map { BigEndian.bytes($0) }
    }

    // MARK: Bytes

    /// The section's plaintext: entries in ascending tag order.
    package func encoded() -> [UInt8] {
        var bytes: [UInt8] = []
        for entry in entries {
            BigEndian.append(entry.tag.rawValue, to: &bytes)
            BigEndian.append(UInt32(entry.value.count), to: &bytes)
            bytes.append(contentsOf: entry.value)
        }
        return bytes
    }
}

import SystemCalls
import TPM

/// A four-character code, as Apple's keychain names attributes (`kSecAttrAccount` is "acct") and
/// item classes ("genp"): four ASCII bytes, stored as a big-endian UINT32.
package struct FourCharacterCode: Sendable, Hashable, Comparable, CustomStringConvertible {
    package let rawValue: UInt32

    package init(rawValue: UInt32) { self.rawValue = rawValue }

    /// - Precondition: `text` is four ASCII characters (every use is a literal in this file).
    package init(_ text: StaticString) {
        precondition(text.utf8CodeUnitCount == 4, "a four-character code has four characters")
        rawValue = text.withUTF8Buffer { BigEndian.integer($0) }
    }

    /// Four ASCII characters, else nil.
    package init?(text: String) {
        let bytes = Array(text.utf8)
        guard bytes.count == 4, bytes.allSatisfy({ $0 < 0x80 }) else { return nil }
        rawValue = BigEndian.integer(bytes)
    }

    package var description: String {
        String(decoding: BigEndian.bytes(rawValue), as: UTF8.self)
    }

    package static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// The attribute tags format 2 knows, with Apple's codes.
package enum AttributeTag {
    package static let account = FourCharacterCode("acct")
    package static let service = FourCharacterCode("svce")
    package static let accessGroup = FourCharacterCode("agrp")
    package static let label = FourCharacterCode("labl")
    package static let comment = FourCharacterCode("icmt")
    package static let generic = FourCharacterCode("gena")
    package static let description = FourCharacterCode("desc")
    package static let type = FourCharacterCode("type")
    package static let creator = FourCharacterCode("crtr")
    package static let server = FourCharacterCode("srvr")
    package static let `protocol` = FourCharacterCode("ptcl")
    package static let port = FourCharacterCode("port")
    package static let path = FourCharacterCode("path")
    package static let authenticationType = FourCharacterCode("atyp")
    package static let securityDomain = FourCharacterCode("sdmn")
    package static let invisible = FourCharacterCode("invi")
    package static let negative = FourCharacterCode("nega")
    package static let synchronizable = FourCharacterCode("sync")
    package static let accessibility = FourCharacterCode("pdmn")
    package static let creationDate = FourCharacterCode("cdat")
    package static let modificationDate = FourCharacterCode("mdat")
}

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

    private(set) var values: [FourCharacterCode: [UInt8]] = [:]

    package init() {}

    package var tags: [FourCharacterCode] { values.keys.sorted() }

    package subscript(tag: FourCharacterCode) -> [UInt8]? {
        get { values[tag] }
        set { values[tag] = newValue }
    }

    // MARK: Typed values

    /// UTF-8 text.
    package func string(_ tag: FourCharacterCode) -> String? {
        values[tag].flatMap { String(validating: $0, as: UTF8.self) }
    }

    package mutating func setString(_ text: String?, for tag: FourCharacterCode) {
        values[tag] = text.map { Array($0.utf8) }
    }

    /// A big-endian UINT32: a port, or a four-character code (protocol, authentication type).
    package func uint32(_ tag: FourCharacterCode) -> UInt32? {
        guard let bytes = values[tag], bytes.count == 4 else { return nil }
        return BigEndian.integer(bytes)
    }

    package mutating func setUInt32(_ value: UInt32?, for tag: FourCharacterCode) {
        values[tag] = value.map { BigEndian.bytes($0) }
    }

    /// One byte, 0 or 1.
    package func bool(_ tag: FourCharacterCode) -> Bool? {
        guard let bytes = values[tag], bytes.count == 1, bytes[0] <= 1 else { return nil }
        return bytes[0] == 1
    }

    package mutating func setBool(_ value: Bool?, for tag: FourCharacterCode) {
        values[tag] = value.map { [$0 ? 1 : 0] }
    }

    /// A big-endian INT64 of nanoseconds since 1970-01-01T00:00:00Z: fine enough that items
    /// created in a burst still list in creation order.
    package func nanoseconds(_ tag: FourCharacterCode) -> Int64? {
        guard let bytes = values[tag], bytes.count == 8 else { return nil }
        return BigEndian.integer(bytes)
    }

    package mutating func setNanoseconds(_ value: Int64?, for tag: FourCharacterCode) {
        values[tag] = value.map { BigEndian.bytes($0) }
    }

    // MARK: Bytes

    /// The section's plaintext: entries in ascending tag order.
    package func encoded() -> [UInt8] {
        var writer = WireWriter()
        for tag in tags {
            let value = values[tag] ?? []
            writer.append(tag.rawValue)
            writer.append(UInt32(value.count))
            writer.append(raw: value)
        }
        return writer.bytes
    }

    /// - Throws: ``StoreError`` `.tampered` for truncated entries, oversized values, or tags
    ///   out of order or repeated (no writer produces those).
    package init(decoding bytes: [UInt8], path: String) throws(StoreError) {
        var reader = WireReader(bytes)
        var previous: FourCharacterCode?
        do {
            while reader.remaining > 0 {
                let tag = FourCharacterCode(rawValue: try reader.readUInt32())
                let count = Int(try reader.readUInt32())
                guard count <= Self.maximumValueSize else {
                    throw StoreError(.tampered, "\(path) has an attribute \(tag) of \(count) bytes")
                }
                if let previous, tag <= previous {
                    throw StoreError(.tampered, "\(path) has attributes out of order")
                }
                values[tag] = try reader.readBytes(count)
                previous = tag
            }
        } catch let error as StoreError {
            throw error
        } catch {
            throw StoreError(.tampered, "\(path) has truncated attributes")
        }
    }
}

/// An item's class, with Apple's codes and primary keys: the attributes that make an item unique
/// (SecItem's errSecDuplicateItem), which also name its file.
package enum ItemClass: UInt32, Sendable, Hashable, CaseIterable {
    /// kSecClassGenericPassword.
    case genericPassword = 0x6765_6E70  // "genp"
    /// kSecClassInternetPassword.
    case internetPassword = 0x696E_6574  // "inet"
    /// kSecClassKey: reserved in the format, not written yet.
    case key = 0x6B65_7973  // "keys"
    /// kSecClassCertificate: reserved in the format, not written yet.
    case certificate = 0x6365_7274  // "cert"

    package var code: FourCharacterCode { FourCharacterCode(rawValue: rawValue) }

    /// Apple's primary key, in the order it is encoded. An absent attribute counts as empty, and
    /// an absent `sync` as false (Apple's defaults), so they name the same item.
    package var primaryKey: [FourCharacterCode] {
        switch self {
        case .genericPassword:
            [AttributeTag.accessGroup, AttributeTag.service, AttributeTag.account, AttributeTag.synchronizable]
        case .internetPassword:
            [AttributeTag.accessGroup, AttributeTag.server, AttributeTag.protocol, AttributeTag.port, AttributeTag.path,
             AttributeTag.account, AttributeTag.authenticationType, AttributeTag.securityDomain, AttributeTag.synchronizable]
        case .key, .certificate:
            []
        }
    }

    /// The primary key as bytes (the class, then for each primary-key tag: tag, UINT32 length,
    /// value), for file names and for the secret's additional data: equal exactly when two items
    /// are the same item.
    package func encodedPrimaryKey(of attributes: AttributeList) -> [UInt8] {
        var writer = WireWriter()
        writer.append(rawValue)
        for tag in primaryKey {
            var value = attributes[tag] ?? []
            if tag == AttributeTag.synchronizable && value.isEmpty { value = [0] }
            writer.append(tag.rawValue)
            writer.append(UInt32(value.count))
            writer.append(raw: value)
        }
        return writer.bytes
    }
}

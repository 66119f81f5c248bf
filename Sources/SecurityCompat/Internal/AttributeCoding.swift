import KeychainVocabulary
import SystemCalls
import WireFormat

/// Attribute values between SecItem's types and the store's bytes, so that values come back with
/// the types stored: an account stored as Data reads back as Data, a port as a number.
///
/// Each tag has a usual type (text, data for `gena`, numbers for `port`, `crtr`, `type`, booleans
/// for `invi`, `nega`, `sync`, dates for `cdat`, `mdat`); a value of another type is recorded in the
/// item's `TKTY` attribute (tag UINT32, type UINT8, repeated; docs/FORMAT.md), which readers of
/// the Keychain API never see.
enum AttributeCoding {
    enum Kind: UInt8 {
        case text = 1
        case data = 2
        case number = 3
        case bool = 4
        case date = 5
    }

    static let typesTag = FourCharacterCode("TKTY")
    static let booleanTags: Set<FourCharacterCode> = Set(
        [AttributeTag.invisible, AttributeTag.negative, AttributeTag.synchronizable] + keyAbilityTags)
    static let numberTags: Set<FourCharacterCode> = [
        AttributeTag.port, AttributeTag.creator, AttributeTag.type, AttributeTag.keySizeInBits,
        AttributeTag.effectiveKeySize, FourCharacterCode("ctyp"), FourCharacterCode("cenc"),
    ]
    static let dateTags: Set<FourCharacterCode> = [AttributeTag.creationDate, AttributeTag.modificationDate]
    static let dataTags: Set<FourCharacterCode> = certificateDataTags.union([
        AttributeTag.generic, AttributeTag.applicationLabel, AttributeTag.applicationTag, AttributeTag.publicKey,
    ])
    /// What a certificate item's attributes hold as data: subject, issuer, serial number, subject
    /// key identifier, public key hash.
    static let certificateDataTags: Set<FourCharacterCode> = [
        FourCharacterCode("subj"), FourCharacterCode("issr"), FourCharacterCode("slnr"), FourCharacterCode("skid"),
        FourCharacterCode("pkhh"),
    ]
    /// A key's abilities and flags (kSecAttrCanSign, kSecAttrIsPermanent, …), stored as given.
    static let keyAbilityTags: [FourCharacterCode] = [
        FourCharacterCode("perm"), FourCharacterCode("sens"), FourCharacterCode("extr"), FourCharacterCode("encr"),
        FourCharacterCode("decr"), FourCharacterCode("drve"), FourCharacterCode("sign"), FourCharacterCode("vrfy"),
        FourCharacterCode("wrap"), FourCharacterCode("unwp"),
    ]
    /// Attributes of the store's own, never returned.
    static let hiddenTags: Set<FourCharacterCode> = [typesTag, AttributeTag.publicKey]

    /// The attributes a class has (what SecItemAdd and SecItemUpdate accept).
    static func knownTags(_ itemClass: ItemClass) -> Set<FourCharacterCode> {
        var tags: Set<FourCharacterCode> = [
            AttributeTag.account, AttributeTag.accessGroup, AttributeTag.label, AttributeTag.comment,
            AttributeTag.description, AttributeTag.creator, AttributeTag.type, AttributeTag.invisible,
            AttributeTag.negative, AttributeTag.synchronizable, AttributeTag.creationDate,
            AttributeTag.modificationDate,
        ]
        if itemClass == .certificate {
            return certificateDataTags.union([
                AttributeTag.accessGroup, AttributeTag.label, AttributeTag.synchronizable, AttributeTag.creationDate,
                AttributeTag.modificationDate, FourCharacterCode("ctyp"), FourCharacterCode("cenc"),
            ])
        }
        if itemClass == .key {
            return Set(
                [
                    AttributeTag.accessGroup, AttributeTag.label, AttributeTag.keyClass, AttributeTag.applicationLabel,
                    AttributeTag.applicationTag, AttributeTag.type, AttributeTag.keySizeInBits,
                    AttributeTag.effectiveKeySize, AttributeTag.tokenID, AttributeTag.synchronizable,
                    AttributeTag.creationDate, AttributeTag.modificationDate,
                ] + keyAbilityTags)
        }
        if itemClass == .genericPassword {
            tags.formUnion([AttributeTag.service, AttributeTag.generic])
        } else {
            tags.formUnion([
                AttributeTag.server, AttributeTag.protocol, AttributeTag.port, AttributeTag.path,
                AttributeTag.authenticationType, AttributeTag.securityDomain,
            ])
        }
        return tags
    }

    static func usualKind(_ tag: FourCharacterCode) -> Kind {
        booleanTags.contains(tag)
            ? .bool
            : numberTags.contains(tag)
                ? .number
                : dateTags.contains(tag)
                    ? .date
                    : dataTags.contains(tag) ? .data : .text
    }

    /// A value's bytes and kind. A boolean tag takes any number; otherwise Swift's type decides.
    static func encode(_ value: Any, for tag: FourCharacterCode) throws(SecStatus) -> (bytes: [UInt8], kind: Kind) {
        if booleanTags.contains(tag) {
            return ([try SecItemRequest.bool(value) ? 1 : 0], .bool)
        }
        if let text = SecItemRequest.optionalString(value) { return (Array(text.utf8), .text) }
        if let data = value as? Data { return (Array(data), .data) }
        if let data = value as? NSData { return (Array(Data(referencing: data)), .data) }
        if let date = value as? Date {
            return (BigEndian.bytes(UInt64(bitPattern: Int64(date.timeIntervalSince1970 * 1e9))), .date)
        }
        if let flag = value as? Bool, !(value is NSNumber) || usualKind(tag) == .bool { return ([flag ? 1 : 0], .bool) }
        if let number = value as? NSNumber { return (BigEndian.bytes(UInt64(bitPattern: number.int64Value)), .number) }
        if let integer = value as? Int { return (BigEndian.bytes(UInt64(bitPattern: Int64(integer))), .number) }
        throw SecStatus(errSecParam)
    }

    /// The value SecItem returns for stored bytes: String, Data, NSNumber (numbers and
    /// booleans), NSDate.
    static func decode(_ bytes: [UInt8], kind: Kind) -> Any {
        switch kind {
        case .text: return String(decoding: bytes, as: UTF8.self)
        case .data: return Data(bytes)
        case .bool: return NSNumber(value: bytes.first.map { $0 != 0 } ?? false)
        case .number:
            switch bytes.count {
            case 8: return NSNumber(value: Int64(bitPattern: BigEndian.integer(bytes)))
            case 4: return NSNumber(value: UInt32(BigEndian.integer(bytes) as UInt64))
            default: return NSNumber(value: 0)
            }
        case .date:
            let nanoseconds = bytes.count == 8 ? Int64(bitPattern: BigEndian.integer(bytes)) : 0
            return NSDate(timeIntervalSince1970: Double(nanoseconds) / 1e9)
        }
    }

    /// The recorded kinds of an item's attributes (those not of their tag's usual kind).
    static func kinds(in list: AttributeList) -> [FourCharacterCode: Kind] {
        guard let bytes = list[typesTag] else { return [:] }
        var kinds: [FourCharacterCode: Kind] = [:]
        var offset = 0
        while offset + 5 <= bytes.count {
            if let kind = Kind(rawValue: bytes[offset + 4]) {
                kinds[FourCharacterCode(rawValue: BigEndian.integer(bytes[offset..<offset + 4]))] = kind
            }
            offset += 5
        }
        return kinds
    }

    static func setKinds(_ kinds: [FourCharacterCode: Kind], in list: inout AttributeList) {
        let unusual = kinds.filter { $0.value != usualKind($0.key) }.sorted { $0.key < $1.key }
        list[typesTag] =
            unusual.isEmpty ? nil : unusual.flatMap { BigEndian.bytes($0.key.rawValue) + [$0.value.rawValue] }
    }

    /// Adds `attributes` (parsed from a dictionary) to `list`, keeping the kinds.
    static func apply(
        _ attributes: [FourCharacterCode: Any], to list: inout AttributeList, itemClass: ItemClass
    ) throws(SecStatus) {
        var kinds = self.kinds(in: list)
        let known = knownTags(itemClass)
        for (tag, value) in attributes {
            guard known.contains(tag) else { throw SecStatus(errSecNoSuchAttr) }
            let (bytes, kind) = try encode(value, for: tag)
            list[tag] = bytes
            kinds[tag] = kind
        }
        setKinds(kinds, in: &list)
    }

    /// An item's attributes as SecItem returns them, by their raw keys.
    static func dictionary(of list: AttributeList) -> [String: Any] {
        let kinds = self.kinds(in: list)
        var result: [String: Any] = [:]
        for tag in list.tags where !hiddenTags.contains(tag) {
            guard let bytes = list[tag] else { continue }
            result[tag.description] = decode(bytes, kind: kinds[tag] ?? usualKind(tag))
        }
        return result
    }
}

import Crypto
import FoundationEssentials
import KeychainVocabulary
import TPMKeychain
import WireFormat

/// One item as the Secret Service shows it: its object ID, the store item that holds it, and the
/// Secret Service's view of its attributes (docs/FORMAT.md, "Secret Service items").
struct SecretItem {
    /// The last element of the item's object path: 32 hex digits derived from its store identity,
    /// so the path is the same in every run of the daemon.
    let id: String
    let identity: ItemIdentity
    var label: String
    var attributes: [String: String]
    var contentType: String
    /// Seconds since 1970, as the specification's `Created` and `Modified` are.
    var created: UInt64
    var modified: UInt64
    /// Whether the secret is under a key record (needs the collection's access control to read).
    var isProtected: Bool
    /// The key record's ID (all zero for the master key).
    var keyRecord: [UInt8] = ItemQueryResult.masterKeyRecord
    /// The store item's persistent reference, which item grants name; nil in memory.
    var reference: [UInt8]? = nil

    static func id(of identity: ItemIdentity) -> String {
        var bytes = Array(identity.accessGroup.utf8) + [0]
        bytes += Array(identity.service.utf8) + [0]
        bytes += Array(identity.account.utf8)
        return Array(SHA256.hash(data: bytes).prefix(16)).hexString
    }
}

/// How Secret Service items live in a store: generic passwords whose Secret Service attributes and
/// content type are two more authenticated, encrypted item attributes.
enum SecretItemMapping {
    /// The Secret Service attributes: UINT32 count, then per pair (sorted by name) a UINT32-sized
    /// UTF-8 name and a UINT32-sized UTF-8 value.
    static let attributesTag = FourCharacterCode("ssat")
    /// The content type (`text/plain`), UTF-8.
    static let contentTypeTag = FourCharacterCode("ssct")
    /// On a collection's properties item: the executables that may use its items, as `ssat`'s
    /// encoding with the paths as names and empty values.
    static let allowedExecutablesTag = FourCharacterCode("ssrx")
    /// On a collection's properties item: one byte, 1 when every read of a secret is confirmed.
    static let confirmEachAccessTag = FourCharacterCode("sscf")
    /// The service of items created through the Secret Service that name no service of their own.
    static let itemService = "org.freedesktop.secrets"
    /// The item holding a collection's label and access rules; not an item of the collection.
    static let collectionService = ItemIdentity.secretServiceCollectionService
    static let defaultContentType = "text/plain"

    static func encode(_ attributes: [String: String]) -> [UInt8] {
        var bytes: [UInt8] = []
        BigEndian.append(UInt32(attributes.count), to: &bytes)
        for (name, value) in attributes.sorted(by: { $0.key < $1.key }) {
            BigEndian.append(UInt32(name.utf8.count), to: &bytes)
            bytes += name.utf8
            BigEndian.append(UInt32(value.utf8.count), to: &bytes)
            bytes += value.utf8
        }
        return bytes
    }

    /// nil for bytes that are not such a list (the item is authenticated, so only a bug writes one).
    static func decode(_ bytes: [UInt8]) -> [String: String]? {
        var reader = WireReader(bytes)
        do {
            let count = try reader.readUInt32()
            var attributes: [String: String] = [:]
            for _ in 0..<count {
                let name = try reader.readBytes(Int(try reader.readUInt32()))
                let value = try reader.readBytes(Int(try reader.readUInt32()))
                guard let nameText = String(validating: name, as: UTF8.self),
                    let valueText = String(validating: value, as: UTF8.self)
                else { return nil }
                attributes[nameText] = valueText
            }
            return reader.remaining == 0 ? attributes : nil
        } catch {
            return nil
        }
    }

    /// The Secret Service view of a store item, or nil for the collection's own properties item.
    /// An item written through the Keychain API or the CLI (no Secret Service attributes) shows
    /// `service` and `account`, and `access-group` when it has one.
    static func item(from result: ItemQueryResult) -> SecretItem? {
        let stored = result.attributes
        let service = stored.string(AttributeTag.service) ?? ""
        let account = stored.string(AttributeTag.account) ?? ""
        let group = stored.string(AttributeTag.accessGroup) ?? ""
        guard service != collectionService else { return nil }
        let identity = ItemIdentity(unchecked: group, service, account)
        var attributes: [String: String]
        if let encoded = stored[attributesTag], let decoded = decode(encoded) {
            attributes = decoded
        } else {
            attributes = ["service": service, "account": account]
            if !group.isEmpty { attributes["access-group"] = group }
        }
        let created = stored.nanoseconds(AttributeTag.creationDate) ?? 0
        let modified = stored.nanoseconds(AttributeTag.modificationDate) ?? created
        return SecretItem(
            id: SecretItem.id(of: identity), identity: identity,
            label: stored.string(AttributeTag.label) ?? "\(service) (\(account))", attributes: attributes,
            contentType: stored.string(contentTypeTag) ?? defaultContentType,
            created: UInt64(max(0, created / 1_000_000_000)), modified: UInt64(max(0, modified / 1_000_000_000)),
            isProtected: result.isProtected, keyRecord: result.keyRecord, reference: result.reference)
    }

    /// The stored attributes a Secret Service write sets (besides the identity's).
    static func storedAttributes(
        identity: ItemIdentity, label: String, attributes: [String: String], contentType: String
    ) -> AttributeList {
        var list = AttributeList(identity)
        list.setString(label, for: AttributeTag.label)
        list[attributesTag] = encode(attributes)
        list.setString(contentType, for: contentTypeTag)
        return list
    }
}

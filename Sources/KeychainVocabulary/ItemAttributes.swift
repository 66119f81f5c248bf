public import FoundationEssentials

/// The attributes of an item: everything but the secret, readable without decrypting it.
///
/// The store's own row as well as what callers see: the engine reads it from an item's
/// authenticated attributes, and every face returns it as it is.
public struct ItemAttributes: Sendable, Hashable, CustomStringConvertible {
    /// The service (kSecAttrService).
    public let service: String
    /// The account, the item's key within its service (kSecAttrAccount).
    public let account: String
    /// The access group, nil when the item belongs to none (kSecAttrAccessGroup).
    public var accessGroup: String? { accessGroupName.isEmpty ? nil : accessGroupName }
    /// The access group as stored: empty for none.
    package let accessGroupName: String
    /// A name for people (kSecAttrLabel).
    public var label: String?
    /// A note for people (kSecAttrComment).
    public var comment: String?
    /// Application data stored with the item (kSecAttrGeneric).
    public var genericData: Data?
    /// When the item was first written (kSecAttrCreationDate).
    public let creationDate: Date
    /// When the item was last written (kSecAttrModificationDate).
    public let modificationDate: Date
    /// When the item may be read (kSecAttrAccessible); ``Accessibility`` says when the TPM
    /// enforces it.
    public let accessibility: Accessibility

    /// Attributes as the store holds them.
    package init(
        service: String, account: String, accessGroupName: String, label: String?, comment: String?, genericData: Data?,
        creationDate: Date, modificationDate: Date, accessibility: Accessibility
    ) {
        self.service = service
        self.account = account
        self.accessGroupName = accessGroupName
        self.label = label
        self.comment = comment
        self.genericData = genericData
        self.creationDate = creationDate
        self.modificationDate = modificationDate
        self.accessibility = accessibility
    }

    /// Names and dates; generic data by size only. Never a secret: the item's value is not here.
    public var description: String {
        var parts = ["service: \"\(service)\"", "account: \"\(account)\""]
        if let accessGroup { parts.append("accessGroup: \"\(accessGroup)\"") }
        if let label { parts.append("label: \"\(label)\"") }
        if let comment { parts.append("comment: \"\(comment)\"") }
        if let genericData { parts.append("genericData: \(genericData.count) bytes") }
        parts.append("created: \(creationDate)")
        parts.append("modified: \(modificationDate)")
        parts.append("accessibility: \(accessibility)")
        return "ItemAttributes(" + parts.joined(separator: ", ") + ")"
    }
}

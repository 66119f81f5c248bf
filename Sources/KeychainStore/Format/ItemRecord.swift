package import Foundation

/// How an item is allowed to be read, as on Apple platforms. Stored and authenticated with every
/// item. Every TPMKeychain item is bound to this machine's TPM, so the "ThisDeviceOnly" variants
/// describe all items; the distinction is kept so code ported from iOS round-trips its values.
///
/// - Important: enforced by the TPM for items whose key record carries it (written with an access
///   control, or through SecItem while a device passcode is set); an item written with a class
///   alone under the master key keeps it as an authenticated label (docs/SECURITY.md, "Access control").
package enum AccessibilityClass: UInt8, Sendable, Hashable, Codable, CaseIterable {
    /// kSecAttrAccessibleWhenUnlocked, the default.
    case whenUnlocked = 1
    /// kSecAttrAccessibleAfterFirstUnlock.
    case afterFirstUnlock = 2
    /// kSecAttrAccessibleWhenPasscodeSetThisDeviceOnly.
    case whenPasscodeSetThisDeviceOnly = 3
    /// kSecAttrAccessibleWhenUnlockedThisDeviceOnly.
    case whenUnlockedThisDeviceOnly = 4
    /// kSecAttrAccessibleAfterFirstUnlockThisDeviceOnly.
    case afterFirstUnlockThisDeviceOnly = 5
    /// kSecAttrAccessibleAlways (deprecated by Apple): readable in any lock state.
    case always = 6
    /// kSecAttrAccessibleAlwaysThisDeviceOnly (deprecated by Apple).
    case alwaysThisDeviceOnly = 7

    /// Whether the class is one of the `ThisDeviceOnly` ones: never exported or recovered.
    package var isThisDeviceOnly: Bool {
        switch self {
        case .whenPasscodeSetThisDeviceOnly, .whenUnlockedThisDeviceOnly, .afterFirstUnlockThisDeviceOnly, .alwaysThisDeviceOnly: true
        case .whenUnlocked, .afterFirstUnlock, .always: false
        }
    }

    /// What the device's lock state must be for the class's items to be read.
    package var lockRequirement: LockRequirement {
        switch self {
        case .whenUnlocked, .whenUnlockedThisDeviceOnly, .whenPasscodeSetThisDeviceOnly: .unlocked
        case .afterFirstUnlock, .afterFirstUnlockThisDeviceOnly: .unlockedSinceBoot
        case .always, .alwaysThisDeviceOnly: .none
        }
    }
}

/// The lock state an accessibility class needs (docs/SECURITY.md, "Accessibility classes").
package enum LockRequirement: Sendable, Hashable {
    /// Readable in any state.
    case none
    /// Readable once the device was unlocked after the TPM last reset (a reboot).
    case unlockedSinceBoot
    /// Readable only while unlocked.
    case unlocked
}

/// What the secret bytes hold, so tools can show them sensibly. Authenticated with the item.
package enum ValueKind: UInt8, Sendable, Hashable {
    case data = 0
    case string = 1
    case bool = 2
    case integer = 3
    case double = 4
    case json = 5
}

/// Who an item belongs to: the triple that names it, validated before it reaches the disk.
package struct ItemIdentity: Sendable, Hashable {
    package static let maximumNameBytes = 1024

    package let accessGroup: String
    package let service: String
    package let account: String

    /// - Throws: ``StoreError`` `.invalidParameter` for an empty or oversized service or account,
    ///   an oversized access group, or a name containing NUL.
    package init(accessGroup: String, service: String, account: String) throws(StoreError) {
        try Self.validate(service, "service", allowEmpty: false)
        try Self.validate(account, "account", allowEmpty: false)
        try Self.validate(accessGroup, "access group", allowEmpty: true)
        self.accessGroup = accessGroup
        self.service = service
        self.account = account
    }

    /// For names read back from an authenticated item, which were validated when written.
    init(unchecked accessGroup: String, _ service: String, _ account: String) {
        self.accessGroup = accessGroup
        self.service = service
        self.account = account
    }

    package static func validate(_ name: String, _ what: String, allowEmpty: Bool) throws(StoreError) {
        let size = name.utf8.count
        if size == 0 && !allowEmpty {
            throw StoreError(.invalidParameter, "The \(what) name is empty")
        }
        guard size <= maximumNameBytes else {
            throw StoreError(.invalidParameter, "The \(what) name is \(size) bytes; the limit is \(maximumNameBytes)")
        }
        guard !name.utf8.contains(0) else {
            throw StoreError(.invalidParameter, "The \(what) name contains a NUL character")
        }
    }
}

/// The attributes of an item: everything but the secret, readable without decrypting it.
package struct StoredAttributes: Sendable, Hashable {
    /// The service (kSecAttrService).
    package let service: String
    /// The account, the item's key within its service (kSecAttrAccount).
    package let account: String
    /// The access group, nil when the item belongs to none (kSecAttrAccessGroup).
    package var accessGroup: String? { accessGroupName.isEmpty ? nil : accessGroupName }
    /// The access group as stored: empty for none.
    package let accessGroupName: String
    /// A name for people (kSecAttrLabel).
    package var label: String?
    /// A note for people (kSecAttrComment).
    package var comment: String?
    /// Application data stored with the item (kSecAttrGeneric).
    package var genericData: Data?
    /// When the item was first written (kSecAttrCreationDate).
    package let creationDate: Date
    /// When the item was last written (kSecAttrModificationDate).
    package let modificationDate: Date
    /// When the item may be read (kSecAttrAccessible).
    ///
    /// - Important: enforced only where the item's key record carries it (``AccessibilityClass``).
    package let accessibility: AccessibilityClass
}

/// Attributes a write sets; nil leaves the stored value (or nothing, for a new item) as it is,
/// and a tag in `clearing` removes that attribute.
package struct AttributeChanges: Sendable {
    package var label: String?
    package var comment: String?
    package var genericData: Data?
    package var accessibility: AccessibilityClass?
    package var clearing: Set<FourCharacterCode>

    package init(label: String? = nil, comment: String? = nil, genericData: Data? = nil, accessibility: AccessibilityClass? = nil,
                 clearing: Set<FourCharacterCode> = []) {
        self.label = label
        self.comment = comment
        self.genericData = genericData
        self.accessibility = accessibility
        self.clearing = clearing
    }

    /// Applies the changes to an item's tagged attributes: clearing first, then setting.
    package func apply(to attributes: inout AttributeList) {
        for tag in clearing { attributes[tag] = nil }
        if let label { attributes.setString(label, for: AttributeTag.label) }
        if let comment { attributes.setString(comment, for: AttributeTag.comment) }
        if let genericData { attributes[AttributeTag.generic] = Array(genericData) }
    }
}

/// A secret and what kind of value it encodes.
package struct ItemValue: Sendable, Hashable {
    /// Values up to 16 MiB; at least 1 MiB is promised.
    package static let maximumSize = 16 << 20

    package let kind: ValueKind
    package let bytes: [UInt8]

    package init(kind: ValueKind, bytes: [UInt8]) {
        self.kind = kind
        self.bytes = bytes
    }
}

/// One item as stored: identity, attributes and (when read) the secret.
package struct ItemRecord: Sendable {
    package var itemID: [UInt8]
    package var generation: UInt64
    package var attributes: StoredAttributes
    package var value: ItemValue
}

public import Foundation
package import KeychainStore

/// How an item is allowed to be read, as on Apple platforms. Stored and authenticated with every
/// item. Every TPMKeychain item is bound to this machine's TPM, so the "ThisDeviceOnly" variants
/// describe all items; the distinction is kept so code ported from iOS round-trips its values.
///
/// - Important: enforced by the TPM for items written with an ``AccessControl`` (and through
///   SecItem while a device passcode is set); an item written with ``Keychain/set(_:forKey:label:comment:genericData:accessibility:)``
///   alone keeps it as an authenticated label.
public enum Accessibility: UInt8, Sendable, Hashable, Codable, CaseIterable {
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
    /// kSecAttrAccessibleAlways: readable whether locked or not. Deprecated by Apple; kept so
    /// ported code compiles.
    case always = 6
    /// kSecAttrAccessibleAlwaysThisDeviceOnly. Deprecated by Apple.
    case alwaysThisDeviceOnly = 7

    /// Whether items of this class stay on this device: never exported, never recovered.
    public var isThisDeviceOnly: Bool { stored.isThisDeviceOnly }
}

extension Accessibility {
    init(_ stored: AccessibilityClass) {
        // The raw values are the format's bytes, the same in both types.
        self = Accessibility(rawValue: stored.rawValue) ?? .whenUnlocked
    }

    package var stored: AccessibilityClass { AccessibilityClass(rawValue: rawValue) ?? .whenUnlocked }
}

/// The attributes of an item: everything but the secret, readable without decrypting it.
public struct ItemAttributes: Sendable, Hashable, CustomStringConvertible {
    /// The service (kSecAttrService).
    public let service: String
    /// The account, the item's key within its service (kSecAttrAccount).
    public let account: String
    /// The access group, nil when the item belongs to none (kSecAttrAccessGroup).
    public var accessGroup: String? { accessGroupName.isEmpty ? nil : accessGroupName }
    /// The access group as stored: empty for none.
    let accessGroupName: String
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
    /// When the item may be read (kSecAttrAccessible).
    ///
    /// - Important: enforced only for items written with an access control (``Accessibility``).
    public let accessibility: Accessibility

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

extension ItemAttributes {
    init(_ stored: StoredAttributes) {
        self.init(service: stored.service, account: stored.account, accessGroupName: stored.accessGroupName, label: stored.label,
                  comment: stored.comment, genericData: stored.genericData, creationDate: stored.creationDate,
                  modificationDate: stored.modificationDate, accessibility: Accessibility(stored.accessibility))
    }
}

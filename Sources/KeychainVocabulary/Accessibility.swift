/// How an item is allowed to be read, as on Apple platforms. Stored and authenticated with every
/// item. Every TPMKeychain item is bound to this machine's TPM, so the "ThisDeviceOnly" variants
/// describe all items; the distinction is kept so code ported from iOS round-trips its values.
///
/// - Important: enforced by the TPM for items whose key record carries it: items written with an
///   ``AccessControl``, and, while a device passcode is set, every item whose class depends on the
///   lock state. An item written with a class alone while no passcode is set stays under the
///   store's master key and keeps the class as an authenticated label (a device without a
///   passcode is always unlocked, as an iPhone without one).
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
    public var isThisDeviceOnly: Bool {
        switch self {
        case .whenPasscodeSetThisDeviceOnly, .whenUnlockedThisDeviceOnly, .afterFirstUnlockThisDeviceOnly,
            .alwaysThisDeviceOnly:
            true
        case .whenUnlocked, .afterFirstUnlock, .always: false
        }
    }
}

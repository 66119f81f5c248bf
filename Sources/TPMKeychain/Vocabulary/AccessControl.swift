package import KeychainStore

/// What reading an item takes, as Apple's `SecAccessControl` says it: an accessibility class and
/// constraints (biometry, passcode) combined with `.or` or `.and`.
///
/// ```swift
/// let control = try AccessControl(.whenUnlockedThisDeviceOnly, flags: [.biometryCurrentSet, .or, .devicePasscode])
/// try await keychain.set(token, forKey: "token", accessControl: control, context: context)
/// ```
///
/// The TPM enforces each constraint (docs/SECURITY.md has the table): the item's key sits in a key
/// record whose protectors only the TPM opens, for the passcode under its dictionary-attack
/// lockout, for `biometryCurrentSet` only while the enrollment counter holds the value it had.
public struct AccessControl: Sendable, Hashable, Codable, CustomStringConvertible {
    /// SecAccessControlCreateFlags, with Apple's raw values.
    public struct Flags: OptionSet, Sendable, Hashable, Codable {
        /// SecAccessControlCreateFlags' raw value.
        public let rawValue: UInt
        /// Flags from Apple's raw value; ``AccessControl/init(_:flags:)`` refuses bits it has no
        /// equivalent for.
        public init(rawValue: UInt) { self.rawValue = rawValue }

        /// Biometry or the device passcode (kSecAccessControlUserPresence). Survives enrollment changes.
        public static let userPresence = Flags(rawValue: 1 << 0)
        /// Any enrolled biometry (kSecAccessControlBiometryAny). Survives enrollment changes.
        public static let biometryAny = Flags(rawValue: 1 << 1)
        /// The biometry enrolled when the item was added (kSecAccessControlBiometryCurrentSet): any
        /// change of the enrolled set makes the item unreadable for good.
        public static let biometryCurrentSet = Flags(rawValue: 1 << 3)
        /// The device passcode (kSecAccessControlDevicePasscode).
        public static let devicePasscode = Flags(rawValue: 1 << 4)
        /// A paired watch or Mac (kSecAccessControlCompanion): refused, Linux has none.
        public static let companion = Flags(rawValue: 1 << 5)
        /// Any one of the constraints suffices (kSecAccessControlOr).
        public static let or = Flags(rawValue: 1 << 14)
        /// All constraints are needed (kSecAccessControlAnd; also the meaning without `.or`).
        public static let and = Flags(rawValue: 1 << 15)
        /// For key items (kSecAccessControlPrivateKeyUsage): refused, the store holds no keys yet.
        public static let privateKeyUsage = Flags(rawValue: 1 << 30)
        /// An application password (kSecAccessControlApplicationPassword): refused for now.
        public static let applicationPassword = Flags(rawValue: 1 << 31)

        /// Apple's older name of ``biometryAny``.
        public static let touchIDAny = biometryAny
        /// Apple's older name of ``biometryCurrentSet``.
        public static let touchIDCurrentSet = biometryCurrentSet
    }

    /// When the item is readable (kSecAttrAccessible).
    public let accessibility: Accessibility
    /// The constraints.
    public let flags: Flags

    /// Validates the combination by the rules of Apple's `SecAccessControlCreateWithFlags`.
    ///
    /// - Throws: ``KeychainError`` `.invalidParameter` for `.or` with `.and`, both biometry flags,
    ///   `.userPresence` with other constraints, or flags with no equivalent here.
    public init(_ accessibility: Accessibility, flags: Flags = []) throws(KeychainError) {
        _ = try engine { () throws(StoreError) in try Protection(accessibility: accessibility.stored, flags: Self.engineFlags(flags)) }
        self.accessibility = accessibility
        self.flags = flags
    }

    /// The accessibility class and the names of the constraint flags, for logs.
    public var description: String {
        let names: [(Flags, String)] = [(.userPresence, "userPresence"), (.biometryAny, "biometryAny"), (.biometryCurrentSet, "biometryCurrentSet"),
                                        (.devicePasscode, "devicePasscode"), (.or, "or"), (.and, "and")]
        return "AccessControl(\(accessibility), [\(names.filter { flags.contains($0.0) }.map(\.1).joined(separator: ", "))])"
    }

    /// The engine's protection; valid, since ``init(_:flags:)`` checked it.
    package var protection: Protection {
        get throws(KeychainError) {
            try engine { () throws(StoreError) in try Protection(accessibility: accessibility.stored, flags: Self.engineFlags(flags)) }
        }
    }

    /// Apple's flags fit in 32 bits; a bit above them is unknown, and is carried as bit 2 (which
    /// Apple does not define either) so that validation refuses it rather than it being dropped.
    private static func engineFlags(_ flags: Flags) -> AccessFlags {
        let unknownHighBits: AccessFlags = flags.rawValue >> 32 != 0 ? AccessFlags(rawValue: 1 << 2) : []
        return AccessFlags(rawValue: UInt32(truncatingIfNeeded: flags.rawValue)).union(unknownHighBits)
    }

    /// Decodes an access control and validates it again, as ``init(_:flags:)`` does, so a
    /// combination that init refuses cannot arrive through a decoder.
    ///
    /// - Throws: the decoder's errors, or ``KeychainError`` `.invalidParameter`.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        try self.init(try container.decode(Accessibility.self, forKey: .accessibility), flags: try container.decode(Flags.self, forKey: .flags))
    }

    private enum CodingKeys: String, CodingKey { case accessibility, flags }
}

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

        /// Every flag Apple defines; any other bit is refused.
        static let known: Flags = [
            .userPresence, .biometryAny, .biometryCurrentSet, .devicePasscode, .companion, .or, .and,
            .privateKeyUsage, .applicationPassword,
        ]
    }

    /// When the item is readable (kSecAttrAccessible).
    public let accessibility: Accessibility
    /// The constraints.
    public let flags: Flags

    /// Validates the combination by the rules of Apple's `SecAccessControlCreateWithFlags`.
    ///
    /// The store applies the same check to every key record it reads, so a combination refused
    /// here cannot arrive from disk either.
    ///
    /// - Throws: ``KeychainError`` `.invalidParameter` naming the rule broken: `.or` with `.and`,
    ///   both biometry flags, `.userPresence` with other constraints, a logical operation with
    ///   nothing to combine, or flags with no equivalent here.
    public init(_ accessibility: Accessibility, flags: Flags = []) throws(KeychainError) {
        try Self.validate(flags)
        self.accessibility = accessibility
        self.flags = flags
    }

    /// A class with no constraint, which needs no validation.
    package init(unconstrained accessibility: Accessibility) {
        self.accessibility = accessibility
        flags = []
    }

    /// The accessibility class and the names of the constraint flags, for logs.
    public var description: String {
        let names: [(Flags, String)] = [
            (.userPresence, "userPresence"), (.biometryAny, "biometryAny"), (.biometryCurrentSet, "biometryCurrentSet"),
            (.devicePasscode, "devicePasscode"), (.or, "or"), (.and, "and"),
        ]
        return
            "AccessControl(\(accessibility), [\(names.filter { flags.contains($0.0) }.map(\.1).joined(separator: ", "))])"
    }

    private static func validate(_ flags: Flags) throws(KeychainError) {
        guard flags.isSubset(of: .known) else {
            throw KeychainError(
                .invalidParameter,
                "Unknown access-control flags 0x\(String(flags.subtracting(.known).rawValue, radix: 16))")
        }
        guard !flags.isSuperset(of: [.or, .and]) else {
            throw KeychainError(.invalidParameter, "Only one logical operation can be set: .or or .and, not both")
        }
        guard !flags.isSuperset(of: [.biometryAny, .biometryCurrentSet]) else {
            throw KeychainError(
                .invalidParameter, "Only one biometry constraint can be set: .biometryAny or .biometryCurrentSet")
        }
        if flags.contains(.userPresence) {
            guard flags.subtracting([.userPresence, .applicationPassword, .privateKeyUsage]).isEmpty else {
                throw KeychainError(
                    .invalidParameter,
                    ".userPresence already means biometry or passcode; it cannot be combined with other constraints or logical operations"
                )
            }
        }
        guard !flags.contains(.companion) else {
            throw KeychainError(.invalidParameter, ".companion (a paired watch or Mac) has no equivalent on Linux")
        }
        guard !flags.contains(.applicationPassword) else {
            throw KeychainError(
                .invalidParameter,
                ".applicationPassword is not supported yet: protect the item with the device passcode, or use a password cipher"
            )
        }
        let constrains = !flags.isDisjoint(with: [.userPresence, .biometryAny, .biometryCurrentSet, .devicePasscode])
        guard constrains || flags.isDisjoint(with: [.or, .and]) else {
            throw KeychainError(.invalidParameter, "A logical operation (.or, .and) needs constraints to combine")
        }
    }

    /// Decodes an access control and validates it again, as ``init(_:flags:)`` does, so a
    /// combination that init refuses cannot arrive through a decoder.
    ///
    /// - Throws: the decoder's errors, or ``KeychainError`` `.invalidParameter`.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        try self.init(
            try container.decode(Accessibility.self, forKey: .accessibility),
            flags: try container.decode(Flags.self, forKey: .flags))
    }

    private enum CodingKeys: String, CodingKey { case accessibility, flags }
}

/// Apple's SecAccessControlCreateFlags with their raw values, as the engine stores them in key
/// records. The API layer validates combinations (``Protection/init(accessibility:flags:)``
/// applies the same rules, so a record read from disk is checked too).
package struct AccessFlags: OptionSet, Sendable, Hashable {
    package let rawValue: UInt32
    package init(rawValue: UInt32) { self.rawValue = rawValue }

    package static let userPresence = AccessFlags(rawValue: 1 << 0)
    package static let biometryAny = AccessFlags(rawValue: 1 << 1)
    package static let biometryCurrentSet = AccessFlags(rawValue: 1 << 3)
    package static let devicePasscode = AccessFlags(rawValue: 1 << 4)
    package static let companion = AccessFlags(rawValue: 1 << 5)
    package static let or = AccessFlags(rawValue: 1 << 14)
    package static let and = AccessFlags(rawValue: 1 << 15)
    package static let privateKeyUsage = AccessFlags(rawValue: 1 << 30)
    package static let applicationPassword = AccessFlags(rawValue: 1 << 31)

    /// Every flag Apple defines; other bits are an error.
    package static let known: AccessFlags = [.userPresence, .biometryAny, .biometryCurrentSet, .devicePasscode, .companion,
                                             .or, .and, .privateKeyUsage, .applicationPassword]
}

/// What reading an item's secret requires: its accessibility class and access-control flags,
/// reduced to the constraints this library enforces (docs/SECURITY.md has the table).
package struct Protection: Sendable, Hashable {
    /// Which biometric enrollment a constraint accepts.
    package enum Biometry: Sendable, Hashable {
        /// Any enrolled authenticator; survives enrollment changes.
        case any
        /// The enrollment as it was when the item was added; invalidated by any change, by the TPM.
        case currentSet
    }

    package let accessibility: AccessibilityClass
    package let flags: AccessFlags
    /// The biometric constraint, if any.
    package let biometry: Biometry?
    /// Whether the device passcode is a constraint.
    package let passcode: Bool
    /// With both constraints: true when either suffices (`.or`, userPresence), false when both are needed.
    package let eitherSuffices: Bool

    /// An item with an accessibility class and no access-control flags.
    package init(accessibility: AccessibilityClass) {
        self.accessibility = accessibility
        flags = []
        biometry = nil
        passcode = false
        eitherSuffices = true
    }

    /// Validates `flags` by the rules of Apple's SecAccessControlCreateWithFlags, then reduces
    /// them to constraints.
    ///
    /// - Throws: ``StoreError`` `.invalidParameter` naming the rule broken.
    package init(accessibility: AccessibilityClass, flags: AccessFlags) throws(StoreError) {
        guard flags.isSubset(of: .known) else {
            throw StoreError(.invalidParameter, "Unknown access-control flags 0x\(String(flags.subtracting(.known).rawValue, radix: 16))")
        }
        guard !flags.isSuperset(of: [.or, .and]) else {
            throw StoreError(.invalidParameter, "Only one logical operation can be set: .or or .and, not both")
        }
        guard !flags.isSuperset(of: [.biometryAny, .biometryCurrentSet]) else {
            throw StoreError(.invalidParameter, "Only one biometry constraint can be set: .biometryAny or .biometryCurrentSet")
        }
        if flags.contains(.userPresence) {
            guard flags.subtracting([.userPresence, .applicationPassword, .privateKeyUsage]).isEmpty else {
                throw StoreError(.invalidParameter, ".userPresence already means biometry or passcode; it cannot be combined with other constraints or logical operations")
            }
        }
        guard !flags.contains(.companion) else {
            throw StoreError(.invalidParameter, ".companion (a paired watch or Mac) has no equivalent on Linux")
        }
        guard !flags.contains(.privateKeyUsage) else {
            throw StoreError(.invalidParameter, ".privateKeyUsage applies to key items, which this store does not hold yet")
        }
        guard !flags.contains(.applicationPassword) else {
            throw StoreError(.invalidParameter, ".applicationPassword is not supported yet: protect the item with the device passcode, or use a password cipher")
        }
        if flags.contains(.userPresence) {
            biometry = .any
            passcode = true
            eitherSuffices = true
        } else {
            biometry = flags.contains(.biometryCurrentSet) ? .currentSet : flags.contains(.biometryAny) ? .any : nil
            passcode = flags.contains(.devicePasscode)
            // Apple: several constraints without .or are all required (k-of-n with k = n).
            eitherSuffices = flags.contains(.or)
        }
        guard biometry != nil || passcode || flags.isDisjoint(with: [.or, .and]) else {
            throw StoreError(.invalidParameter, "A logical operation (.or, .and) needs constraints to combine")
        }
        self.accessibility = accessibility
        self.flags = flags
    }

    /// Whether reading needs more than the store's master key. Lock states count only where a
    /// passcode exists: without one a device is always unlocked (as an iPhone without a passcode),
    /// so such items stay under the master key.
    package func needsKeyRecord(passcodeSet: Bool) -> Bool {
        biometry != nil || passcode || accessibility == .whenPasscodeSetThisDeviceOnly
            || (passcodeSet && accessibility.lockRequirement != .none)
    }

    /// Whether the device must have a passcode for the item to be added.
    package var requiresPasscodeSet: Bool {
        passcode || accessibility == .whenPasscodeSetThisDeviceOnly
    }

    /// Whether the record's key (or half of it) is sealed to the TPM under a policy: biometry,
    /// or a lock state with no passcode constraint to stand for it.
    package var hasSealedProtector: Bool { biometry != nil || !passcode }

    /// Whether the record's key (or half of it) is wrapped to the device passcode key.
    package var hasPasscodeProtector: Bool { passcode }

    /// Whether both protectors must be opened (`.and`): the record key combines both halves.
    package var needsBothProtectors: Bool { biometry != nil && passcode && !eitherSuffices }

    /// Whether reading needs the passcode key the record was made for to be the device's current
    /// one: whenPasscodeSet items, and a passcode protector that is the only way in or half of it.
    package var needsPasscodeKey: Bool {
        accessibility == .whenPasscodeSetThisDeviceOnly || (hasPasscodeProtector && (!hasSealedProtector || needsBothProtectors))
    }
}

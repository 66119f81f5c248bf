package import KeychainVocabulary

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

    /// The item's accessibility class and access-control flags, as the caller gave them.
    package let control: AccessControl
    /// The biometric constraint, if any.
    package let biometry: Biometry?
    /// Whether the device passcode is a constraint.
    package let passcode: Bool
    /// With both constraints: true when either suffices (`.or`, userPresence), false when both are needed.
    package let eitherSuffices: Bool

    package var accessibility: Accessibility { control.accessibility }
    package var flags: AccessControl.Flags { control.flags }

    /// An item with an accessibility class and no access-control flags.
    package init(accessibility: Accessibility) {
        self.init(AccessControl(unconstrained: accessibility))
    }

    /// Reduces an access control, which its initializer validated by Apple's rules, to constraints.
    package init(_ control: AccessControl) {
        self.control = control
        let flags = control.flags
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
    }

    /// Whether reading needs more than the store's master key. Lock states count only where a
    /// passcode exists: without one a device is always unlocked (as an iPhone without a passcode),
    /// so such items stay under the master key.
    ///
    /// - Parameter passcodeSet: asked only when the answer depends on it (a lock-state class with
    ///   no constraint), so that other writes read no device state.
    package func needsKeyRecord(passcodeSet: () throws(KeychainError) -> Bool) throws(KeychainError) -> Bool {
        if biometry != nil || passcode || accessibility == .whenPasscodeSetThisDeviceOnly { return true }
        guard accessibility.lockRequirement != .none else { return false }
        return try passcodeSet()
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
        accessibility == .whenPasscodeSetThisDeviceOnly
            || (hasPasscodeProtector && (!hasSealedProtector || needsBothProtectors))
    }
}

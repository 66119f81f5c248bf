package import KeychainVocabulary

extension Accessibility {
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

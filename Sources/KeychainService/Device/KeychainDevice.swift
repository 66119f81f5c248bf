import KeychainStore
public import KeychainVocabulary
public import TPM

/// The device a store belongs to: its passcode, lock state and biometric enrollment epoch, shared
/// by the user's stores on one TPM (as an iPhone's passcode is shared by its apps).
///
/// ```swift
/// let device = KeychainDevice(location: location)
/// try device.setPasscode(SecretBytes(copying: Array("4711-correct-horse".utf8)))
/// try device.lock()                       // whenUnlocked items are now refused by the TPM
/// try device.unlock(passcode: passcode)   // a wrong passcode counts toward the TPM's lockout
/// ```
public struct KeychainDevice: Sendable {
    /// The store whose device this is.
    public let location: KeychainLocation

    /// The device of the store at `location`. Touches nothing: the device's state is read or
    /// created by the calls that need it.
    ///
    /// - Parameter location: the store; the user's default store when omitted.
    public init(location: KeychainLocation = .default) {
        self.location = location
    }

    /// What the device holds: for `tpm-keychain tpm-status` and tests.
    public struct Status: Sendable {
        /// Whether a device passcode is set.
        public let passcodeIsSet: Bool
        /// The enrollment counter's value (nil: not defined yet).
        public let enrollmentCounter: UInt64?
        /// The passcode counter's value (nil: not defined yet).
        public let passcodeCounter: UInt64?
        /// Unlocked since the TPM's last reset (nil: the lock-state index is not defined).
        public let unlockedSinceBoot: Bool?
        /// Unlocked now (nil: the lock-state index is not defined).
        public let unlocked: Bool?
        /// The TPM's dictionary-attack state.
        public let dictionaryAttack: TPMDictionaryAttackStatus
        /// The NV handles: enrollment counter, passcode counter, lock state; empty until the device
        /// is made (by the first passcode, enrollment or protected item that needs it).
        public let nvIndices: [UInt32]
        /// Whether the indices are version 1's (handles from the user ID, empty authorization), which
        /// every TPM user can move, write or undefine; a device made since has indices only it can write.
        public let nvIndicesOpenToOtherUsers: Bool
        /// Where the device's state file lives.
        public let directory: String
    }

    /// What the device holds now: whether a passcode is set, its counters and lock state, and
    /// the TPM's dictionary-attack state.
    ///
    /// - Throws: ``KeychainError``.
    public func status() throws(KeychainError) -> Status {
        try withDevice { (device) throws(KeychainError) in
            let status = try device.status()
            return Status(
                passcodeIsSet: status.passcodeSet, enrollmentCounter: status.enrollmentCounter,
                passcodeCounter: status.passcodeCounter, unlockedSinceBoot: status.lockState?.sinceBoot,
                unlocked: status.lockState?.now, dictionaryAttack: status.dictionaryAttack,
                nvIndices: status.indices?.all ?? [], nvIndicesOpenToOtherUsers: status.legacyIndices,
                directory: device.directoryPath)
        }
    }

    /// Sets the first device passcode (4 to 1024 bytes). It is never stored: the TPM holds a
    /// key sealed with it, under dictionary-attack protection. When the location's store has a
    /// recovery key, the passcode key is escrowed to it (``reestablishPasscode(recoveryKey:newPasscode:)``).
    ///
    /// - Throws: ``KeychainError`` `.duplicateItem` when one is set, `.invalidParameter`.
    public func setPasscode(_ passcode: SecretBytes) throws(KeychainError) {
        let escrow = try escrowToStore()
        try withDevice { (device) throws(KeychainError) in try device.setPasscode(passcode, escrow: escrow) }
    }

    /// Changes the passcode. One sealed key is replaced; no item is rewritten; a copy of the old
    /// sealed key no longer opens (the TPM's passcode counter moved).
    ///
    /// - Throws: ``KeychainError`` `.authenticationFailed` (wrong passcode, counted by the TPM),
    ///   `.lockout`, `.passcodeNotSet`, `.invalidParameter`.
    public func changePasscode(from old: SecretBytes, to new: SecretBytes) throws(KeychainError) {
        let escrow = try escrowToStore()
        try withDevice { (device) throws(KeychainError) in
            try device.changePasscode(from: old, to: new, escrow: escrow)
        }
    }

    /// Makes the passcode work again after the TPM lost the device's passcode counter (anyone who
    /// may use a TPM whose owner hierarchy has no password can delete it; docs/SECURITY.md), with
    /// the recovery key of the location's store, to which the passcode key was escrowed when the
    /// passcode was last set or changed. The same passcode key is sealed under `newPasscode`, so
    /// every item protected by the passcode opens again with it; the device starts locked.
    /// Items bound to the enrollment (biometryCurrentSet) stay invalid when its counter was lost.
    ///
    /// - Throws: ``KeychainError`` `.notAvailable` when nothing was escrowed in the store,
    ///   `.authenticationFailed` for another recovery key or a key that is no longer the
    ///   device's, `.passcodeNotSet`, `.invalidParameter`, `.storeNotFound`.
    public func reestablishPasscode(recoveryKey: RecoveryKey, newPasscode: SecretBytes) throws(KeychainError) {
        let escrowed = try ItemStore.openPasscodeEscrow(at: location.path, recoveryKey: recoveryKey.secret)
        try withDevice { (device) throws(KeychainError) in
            try device.reestablishPasscode(
                seed: escrowed.seed, deviceBase: escrowed.deviceBase, newPasscode: newPasscode)
        }
    }

    /// What escrows a new passcode key to the store's recovery key; nil when the store has none.
    /// The store is opened first: escrowing then needs no TPM, whose connection the device holds
    /// while it calls this (a second one would wait for it on a TPM without a resource manager).
    private func escrowToStore() throws(KeychainError) -> Device.PasscodeEscrow? {
        guard location.storeExists, location.hasRecoveryKey else { return nil }
        let store = try OpenStores.store(at: location)
        return { (seed, publicKey, base) throws(KeychainError) in
            _ = try store.escrowPasscode(seed: seed, publicKey: publicKey, deviceBase: base)
        }
    }

    /// Removes the passcode; items that require it become unreadable for good.
    ///
    /// - Throws: as ``changePasscode(from:to:)``.
    public func removePasscode(_ passcode: SecretBytes) throws(KeychainError) {
        try withDevice { (device) throws(KeychainError) in try device.removePasscode(passcode) }
    }

    /// Whether a device passcode is set.
    ///
    /// - Throws: ``KeychainError`` from choosing the TPM and reading the device's state.
    public func passcodeIsSet() throws(KeychainError) -> Bool {
        try withDevice { (device) throws(KeychainError) in try device.passcodeIsSet() }
    }

    /// Locks the device: items of the whenUnlocked classes are refused by the TPM until ``unlock(passcode:)``.
    ///
    /// - Throws: ``KeychainError`` `.passcodeNotSet`.
    /// A session holder of the user's (`tpm-keychain hold-session`) is told, and erases the keys it holds.
    public func lock() throws(KeychainError) {
        try withDevice { (device) throws(KeychainError) in try device.lock() }
        SessionHolder.tell(.lock)
    }

    /// Unlocks the device with its passcode (a wrong one counts toward the TPM's lockout).
    ///
    /// - Throws: ``KeychainError`` `.authenticationFailed`, `.lockout`, `.passcodeNotSet`.
    public func unlock(passcode: SecretBytes) throws(KeychainError) {
        try withDevice { (device) throws(KeychainError) in try device.unlock(passcode: passcode) }
        SessionHolder.tell(.unlock)
    }

    private func withDevice<R>(_ body: (Device) throws(KeychainError) -> R) throws(KeychainError) -> R {
        try Devices.with(location) { (device) throws(KeychainError) in try body(device) }
    }
}

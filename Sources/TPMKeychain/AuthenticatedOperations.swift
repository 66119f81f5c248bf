public import KeychainService

// The public entry points that take an authentication context: the service opens what they need
// through it, as a ProofSource.

extension KeychainLocation {
    /// Replaces the store's master key with a new one sealed to the TPM and re-encrypts every
    /// item and key record under it, crash-safe: killed at any point, the store holds either the
    /// old key and its files or the new ones, never a mix (docs/FORMAT.md, "Key rotation").
    /// Other processes with the store open notice and follow. Values, attributes, protections and
    /// persistent references stay as they were.
    ///
    /// A protected item's secret can only be re-encrypted by someone who can read it: each key
    /// record in use is opened through `context` first (one prompt per protection; a reuse window
    /// covers them). Items whose protection was invalidated (an enrollment change, a removed
    /// passcode) cannot be re-encrypted: the rotation stops with `.itemInvalidated` until they are
    /// deleted or purged (``purgeInvalidatedItems()``).
    ///
    /// - Throws: ``KeychainError`` `.interactionNotAllowed` (protected items and no context),
    ///   `.itemInvalidated` (items that can never open again are in the store),
    ///   `.userCanceled`, `.authenticationFailed`, `.storeNotFound`, `.tampered` (an item that fails
    ///   authentication: nothing is changed), `.tpmUnavailable`, `.timedOut`, `.storageFailed`.
    @discardableResult
    public func rotateKeys(context: AuthenticationContext? = nil) async throws(KeychainError) -> KeyRotation {
        try await rotateKeys(proofs: context)
    }
}

extension KeychainArchive {
    /// Writes every item of `location` that may leave the device to a new file at `path`
    /// (mode 0600; never over an existing file); items that may not are counted in the report.
    ///
    /// - Parameters:
    ///   - location: the store to export.
    ///   - path: the archive to create.
    ///   - protection: a passphrase, or another machine's device import key.
    ///   - context: opens items only the lock state protects; it never prompts.
    ///   - progress: called with the number of items read so far (the walk does not count them first).
    /// - Throws: ``KeychainError`` `.invalidParameter` for an existing `path`, `.storageFailed`,
    ///   and the errors of opening the store. The file is removed when the export fails.
    public static func export(
        from location: KeychainLocation = .default, to path: String, protection: Protection,
        context: AuthenticationContext? = nil, progress: @Sendable (Int) -> Void = { _ in }
    ) async throws(KeychainError) -> ExportReport {
        try await export(
            from: location, to: path, protection: protection,
            proofs: context ?? AuthenticationContext(location: location),
            progress: progress)
    }

    /// Imports the archive at `path` into `location`: checks the whole archive first, then
    /// writes its items in order. An archive made for a device import key opens with
    /// `location`'s own import key; a passphrase archive needs `passphrase`.
    ///
    /// - Parameters:
    ///   - path: the archive.
    ///   - location: the store that receives the items.
    ///   - passphrase: a passphrase archive's passphrase; nil for one made for a device import key.
    ///   - conflicts: what to do with an item the store has already.
    ///   - accessGroups: the access groups items may be written to ("" for items of none); an
    ///     item of another is skipped (``SkipReason/otherAccessGroup``), so an archive from
    ///     elsewhere cannot plant items in another app's group. nil writes every group, as moving
    ///     one's own keychain needs.
    ///   - dryRun: check the archive and report what would change (``ImportReport/planned``),
    ///     writing nothing.
    ///   - context: opens the device import key when the lock state protects it; it never prompts.
    ///   - progress: called with (items done, items in the archive) while writing.
    /// - Throws: ``KeychainError`` `.authenticationFailed` (wrong passphrase), `.wrongTPM` (an
    ///   archive for another TPM's import key), `.tampered` (altered, truncated or reordered:
    ///   nothing was written), `.decodingFailed`, `.unsupportedVersion`, and the store's errors.
    public static func importArchive(
        at path: String, into location: KeychainLocation = .default, passphrase: String? = nil,
        conflicts: ConflictPolicy = .skip, accessGroups: Set<String>? = nil, dryRun: Bool = false,
        context: AuthenticationContext? = nil, progress: @Sendable (Int, Int) -> Void = { _, _ in }
    ) async throws(KeychainError) -> ImportReport {
        try await importArchive(
            at: path, into: location, passphrase: passphrase, conflicts: conflicts, accessGroups: accessGroups,
            dryRun: dryRun, proofs: context ?? AuthenticationContext(location: location), progress: progress)
    }
}

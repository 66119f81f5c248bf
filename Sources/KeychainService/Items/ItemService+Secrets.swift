import KeychainStore
package import KeychainVocabulary

// Protected items: what protects them, and opening their key records through an
// ProofSource: an AuthenticationContext (a person, the device's lock state, the TPM).
extension ItemService {
    /// A protected item's opened key record: what decrypts its secret, or keeps it when the item
    /// is rewritten without a new value. Opaque to the faces; it holds key material.
    package struct OpenedKey: Sendable {
        let recordKey: ItemStore.RecordKey
    }

    /// The access control the item's key record carries (a class alone, for items bound only
    /// to the lock state); nil for an item under the store's master key.
    ///
    /// - Throws: ``KeychainError`` `.tampered` for a damaged record, `.itemInvalidated` for one gone.
    package func accessControl(of result: ItemQueryResult) throws(KeychainError) -> AccessControl? {
        try authorize(.readMetadata, group: Self.group(of: result.attributes))
        guard result.isProtected else { return nil }
        return try store.protection(ofRecord: result.keyRecord).protection.control
    }

    /// Whether reading the item's secret asks a person (biometry or the passcode), beyond an
    /// unlocked device.
    package func needsPerson(_ result: ItemQueryResult) throws(KeychainError) -> Bool {
        guard let control = try accessControl(of: result) else { return false }
        let protection = Protection(control)
        return protection.biometry != nil || protection.passcode
    }

    /// The key `context` kept for the item from an earlier read in its reuse window, without
    /// asking anyone; nil when there is none, or the item is under the master key.
    package func keptKey(
        for result: ItemQueryResult, context: any ProofSource
    ) throws(KeychainError) -> OpenedKey? {
        try authorize(.readSecret, group: Self.group(of: result.attributes), item: result)
        guard result.isProtected else { return nil }
        let protection = try store.protection(ofRecord: result.keyRecord)
        return context.keptKey(protection, location: location).map(OpenedKey.init)
    }

    /// Opens the item's key record: from `context`'s reuse window, or by asking the person
    /// (biometry, then the passcode where the protection allows it) and the TPM. nil for an item
    /// under the master key.
    ///
    /// - Parameter allowsInteraction: false refuses an item that would ask a person
    ///   (`.interactionNotAllowed`) instead of prompting; lock-state items still open.
    /// - Throws: ``KeychainError`` `.userCanceled`, `.interactionNotAllowed`, `.authenticationFailed`,
    ///   `.lockout`, `.itemInvalidated`, `.biometryNotEnrolled`.
    package func openKey(
        for result: ItemQueryResult, context: any ProofSource,
        allowsInteraction: Bool = true
    ) async throws(KeychainError) -> OpenedKey? {
        do {
            return try await openKeyUnrecorded(for: result, context: context, allowsInteraction: allowsInteraction)
        } catch {
            // A key in the TPM that could not be opened for a use is a use refused: on the owner's record.
            if Self.holdsTPMKey(result) {
                KeyUseLog.record(
                    "open", label: result.attributes.string(AttributeTag.label) ?? "", caller: caller,
                    outcome: "refused: " + error.message)
            }
            throw error
        }
    }

    private func openKeyUnrecorded(
        for result: ItemQueryResult, context: any ProofSource, allowsInteraction: Bool
    ) async throws(KeychainError) -> OpenedKey? {
        try authorize(.readSecret, group: Self.group(of: result.attributes), item: result)
        guard result.isProtected else { return nil }
        let protection = try store.protection(ofRecord: result.keyRecord)
        if !allowsInteraction, context.keptKey(protection, location: location) == nil,
            protection.protection.biometry != nil || protection.protection.passcode
        {
            throw KeychainError(
                .interactionNotAllowed, "The item needs biometry or the device passcode, and interaction is not allowed"
            )
        }
        return OpenedKey(recordKey: try await context.recordKey(for: protection, store: store, location: location))
    }

    /// A generic password's secret by its identity, with `key` for a protected one: one read of
    /// its file and one authenticated decryption, no attributes (the Secret Service's GetSecret,
    /// whose attributes are in its index already). nil when there is no such item.
    ///
    /// - Throws: ``KeychainError`` `.interactionNotAllowed` for a protected item without its key, `.tampered`.
    package func secret(of identity: ItemIdentity, key: OpenedKey?) throws(KeychainError) -> [UInt8]? {
        try authorize(.readSecret, group: identity.accessGroup)
        return try store.value(identity, recordKey: key?.recordKey)?.bytes
    }

    /// The item's secret: the one read with it, else decrypted (with `key` for a protected item).
    /// nil when the item went away since it was found.
    ///
    /// - Throws: ``KeychainError`` `.interactionNotAllowed` for a protected item without its key, `.tampered`.
    package func secret(of result: ItemQueryResult, key: OpenedKey?) throws(KeychainError) -> [UInt8]? {
        try authorize(.readSecret, group: Self.group(of: result.attributes), item: result)
        if let value = result.value { return value }
        if !result.isProtected, let value = warmSecret(of: result) { return value }
        return try store.secret(of: result, recordKey: key?.recordKey)
    }

    /// The item's secret, opening its key record when that needs no person: an item bound only
    /// to the lock state (the TPM checks it) or to nothing. For tools that never prompt.
    ///
    /// - Throws: ``KeychainError`` `.interactionNotAllowed` while the keychain or the login
    ///   session is locked, or for an item that needs biometry or the passcode; `.tampered`.
    package func secretNeedingNoPerson(of result: ItemQueryResult) throws(KeychainError) -> [UInt8]? {
        try authorize(.readSecret, group: Self.group(of: result.attributes), item: result)
        guard result.isProtected else { return try secret(of: result, key: nil) }
        let key = try recordKeyNeedingNoPerson(
            try store.protection(ofRecord: result.keyRecord),
            person: "The item needs biometry or the device passcode, which this tool does not ask for")
        return try store.secret(of: result, recordKey: key)
    }

    /// Whether opening the item needs a person: biometry or the device passcode.
    package func needsAPerson(_ result: ItemQueryResult) throws(KeychainError) -> Bool {
        guard result.isProtected else { return false }
        let protection = try store.protection(ofRecord: result.keyRecord).protection
        return protection.biometry != nil || protection.passcode
    }

    /// Opens the key record of an item whose protection needs no person, after the login
    /// session's lock (the TPM checks the keychain's). `person`: the refusal for one that does.
    func recordKeyNeedingNoPerson(
        _ protection: ItemStore.ItemProtection, person: String
    ) throws(KeychainError) -> ItemStore.RecordKey {
        if location.sessionIsLocked(for: protection.protection.accessibility) {
            throw KeychainError(
                .interactionNotAllowed,
                "The login session is locked: whenUnlocked items cannot be read until it is unlocked")
        }
        guard protection.protection.biometry == nil, !protection.protection.passcode else {
            throw KeychainError(.interactionNotAllowed, person)
        }
        return try Devices.with(location) { (device) throws(KeychainError) in
            try store.openRecord(protection.recordID, device: device, biometry: nil, passcode: nil)
        }
    }
}

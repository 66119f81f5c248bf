public import KeychainVocabulary

// Items whose secret needs a person (biometry, the device passcode) or an unlocked device: the
// async calls that may prompt, through an AuthenticationContext.
extension Keychain {
    /// Stores `value` for `key` under `accessControl`, replacing any item there (upsert).
    ///
    /// Adding never prompts, as on iOS: the item's key is derived from its key record's public
    /// key. `biometryCurrentSet` binds the item to the enrollment `context`'s authenticator
    /// reports now.
    ///
    /// - Throws: ``KeychainError`` `.passcodeNotSet` (the protection needs a device passcode),
    ///   `.biometryNotEnrolled`, `.invalidParameter`, and what ``set(_:forKey:label:comment:genericData:accessibility:)`` throws.
    public func set<Value: Encodable>(
        _ value: Value, forKey key: String, accessControl: AccessControl,
        context: AuthenticationContext? = nil, label: String? = nil
    ) async throws(KeychainError) {
        let enrollment = try await ItemService.enrollment(binding: accessControl, authenticator: context?.authenticator)
        let encoded = try ValueCoding.encode(value)
        let (service, identity) = (try itemService(), try identity(key))
        try service.write(
            identity, mode: .upsert, value: encoded, changes: AttributeChanges(label: label), control: accessControl,
            enrollment: enrollment)
    }

    /// The value for `key`, asking the person through `context` when the item is protected
    /// (once per ``AuthenticationContext/allowableReuseDuration``).
    ///
    /// - Throws: ``KeychainError`` `.userCanceled`, `.interactionNotAllowed` (the context forbids
    ///   prompting, or the keychain is locked), `.authenticationFailed`, `.lockout`,
    ///   `.itemInvalidated` (the item was bound to an enrollment or passcode that changed; it has
    ///   been deleted, and iOS reports errSecItemNotFound), `.biometryNotEnrolled`, and what
    ///   ``get(_:as:)`` throws.
    public func get<Value: Decodable>(
        _ key: String, as type: Value.Type = Value.self,
        context: AuthenticationContext
    ) async throws(KeychainError) -> Value? {
        let (service, identity) = (try itemService(), try identity(key))
        let found = try await service.value(identity, context: context)
        guard let value = found else { return nil }
        return try ValueCoding.decode(value, as: type, key: key)
    }

    /// The access control an item was stored with, or nil for an item under the store's master key.
    ///
    /// - Throws: ``KeychainError`` `.itemNotFound`, `.tampered`.
    public func accessControl(forKey key: String) throws(KeychainError) -> AccessControl? {
        try itemService().accessControl(of: try identity(key))
    }
}

import KeychainStore

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
    public func set<Value: Encodable>(_ value: Value, forKey key: String, accessControl: AccessControl,
                                      context: AuthenticationContext? = nil, label: String? = nil) async throws(KeychainError) {
        let protection = try accessControl.protection
        var enrollment: [UInt8]?
        if protection.biometry == .currentSet, let authenticator = context?.authenticator {
            do {
                enrollment = try await authenticator.enrollment()?.identifier
            } catch {
                throw KeychainError(error)
            }
        }
        let encoded = try ValueCoding.encode(value)
        let (store, identity) = (try OpenStores.store(at: location), try identity(key))
        let changes = AttributeChanges(label: label, comment: nil, genericData: nil, accessibility: accessControl.accessibility.stored)
        try Devices.with(location) { (device) throws(KeychainError) in
            try engine { () throws(StoreError) in
                try store.write(identity, mode: .upsert, value: encoded, changes: changes,
                                access: ItemStore.AccessWrite(protection: protection, device: device, enrollmentIdentifier: enrollment))
            }
        }
    }

    /// The value for `key`, asking the person through `context` when the item is protected
    /// (once per ``AuthenticationContext/allowableReuseDuration``).
    ///
    /// - Throws: ``KeychainError`` `.userCanceled`, `.interactionNotAllowed` (the context forbids
    ///   prompting, or the keychain is locked), `.authenticationFailed`, `.lockout`,
    ///   `.itemInvalidated` (the item was bound to an enrollment or passcode that changed; it has
    ///   been deleted, and iOS reports errSecItemNotFound), `.biometryNotEnrolled`, and what
    ///   ``get(_:as:)`` throws.
    public func get<Value: Decodable>(_ key: String, as type: Value.Type = Value.self,
                                      context: AuthenticationContext) async throws(KeychainError) -> Value? {
        let (store, identity, location) = (try OpenStores.store(at: location), try identity(key), location)
        // One read of the file: inside a reuse window the kept record key decrypts it at once.
        let read = try engine { () throws(StoreError) in
            try store.value(identity) { (protection) in context.keptKey(protection, location: location) }
        }
        let found: ItemValue?
        switch read {
        case .value(let value):
            found = value
        case .needs(let protection):
            let recordKey = try await context.recordKey(for: protection, store: store, location: location)
            found = try engine { () throws(StoreError) in try store.value(identity, recordKey: recordKey) }
        }
        guard let value = found else { return nil }
        return try ValueCoding.decode(value, as: type, key: key)
    }

    /// The access control an item was stored with, or nil for an item under the store's master key.
    ///
    /// - Throws: ``KeychainError`` `.itemNotFound`, `.tampered`.
    public func accessControl(forKey key: String) throws(KeychainError) -> AccessControl? {
        let (store, identity) = (try OpenStores.store(at: location), try identity(key))
        guard let protection = try engine({ () throws(StoreError) in try store.protection(of: identity) }) else { return nil }
        return try AccessControl(Accessibility(protection.protection.accessibility),
                                 flags: AccessControl.Flags(rawValue: UInt(protection.protection.flags.rawValue)))
    }
}

import KeychainStore
package import KeychainVocabulary

// Generic passwords named by service, account and access group: the Keychain API's items, read
// and written by file name without a directory scan.
extension ItemService {
    /// Writes the generic password `identity` names; as ``write(_:primary:mode:value:changes:control:enrollment:key:)``.
    package func write(
        _ identity: ItemIdentity, mode: ItemWriteMode, value: ItemValue?, changes: AttributeChanges,
        control: AccessControl? = nil, enrollment: [UInt8]? = nil
    ) throws(KeychainError) {
        try write(
            .genericPassword, primary: AttributeList(identity), mode: mode, value: value, changes: changes,
            control: control,
            enrollment: enrollment)
    }

    /// The value of the generic password `identity` names, or nil. An item bound only to the
    /// device's lock state is opened with the TPM on every read (nothing is kept without a
    /// context), so locking takes effect at once.
    ///
    /// - Throws: ``KeychainError`` `.interactionNotAllowed` for an item that needs a person (read
    ///   it with a context) or while the session or keychain is locked, `.tampered`.
    package func value(_ identity: ItemIdentity) throws(KeychainError) -> ItemValue? {
        if let value = warmValue(identity) { return value }
        try authorize(.readSecret, group: identity.accessGroup)
        do {
            return try store.value(identity)
        } catch  where error.code == .interactionNotAllowed {
            return try valueNeedingNoPerson(identity)
        }
    }

    /// The value of an item under the master key (no TPM command), or nil when there is none;
    /// what the session holder answers with.
    ///
    /// - Throws: ``KeychainError`` `.interactionNotAllowed` for a protected item, `.tampered`.
    package func valueUnderMasterKey(_ identity: ItemIdentity) throws(KeychainError) -> ItemValue? {
        try authorize(.readSecret, group: identity.accessGroup)
        return try store.value(identity)
    }

    private func valueNeedingNoPerson(_ identity: ItemIdentity) throws(KeychainError) -> ItemValue? {
        guard let protection = try store.protection(of: identity) else {
            return try store.value(identity)
        }
        let key = try recordKeyNeedingNoPerson(
            protection,
            person:
                "The item for \"\(identity.account)\" needs biometry or the device passcode: read it with get(_:as:context:) and an AuthenticationContext"
        )
        return try store.value(identity, recordKey: key)
    }

    /// The value, asking the person through `context` when the item is protected (once per
    /// reuse window). One read of the file when the context kept the item's key.
    package func value(
        _ identity: ItemIdentity, context: any ProofSource
    ) async throws(KeychainError) -> ItemValue? {
        try authorize(.readSecret, group: identity.accessGroup)
        let location = location
        switch try store.value(identity, keptKey: { (protection) in context.keptKey(protection, location: location) }) {
        case .value(let value):
            return value
        case .needs(let protection):
            let recordKey = try await context.recordKey(for: protection, store: store, location: location)
            return try store.value(identity, recordKey: recordKey)
        }
    }

    /// The access control of the item's key record; nil for an item under the master key.
    ///
    /// - Throws: ``KeychainError`` `.itemNotFound`, `.tampered`.
    package func accessControl(of identity: ItemIdentity) throws(KeychainError) -> AccessControl? {
        try authorize(.readMetadata, group: identity.accessGroup)
        return try store.protection(of: identity)?.protection.control
    }

    /// The item's attributes, without decrypting its secret; nil when there is no such item.
    package func attributes(_ identity: ItemIdentity) throws(KeychainError) -> ItemAttributes? {
        try authorize(.readMetadata, group: identity.accessGroup)
        return try store.attributes(identity)
    }

    /// The attributes of every item of a service and access group, in creation order.
    package func list(service: String, accessGroup: String) throws(KeychainError) -> [ItemAttributes] {
        try authorize(.readMetadata, group: accessGroup)
        return try store.list(service: service, accessGroup: accessGroup)
    }

    /// The attributes of every generic password in the store, in creation order.
    package func listAll() throws(KeychainError) -> [ItemAttributes] {
        try store.listAll().filter { AccessDecision.sees($0.accessGroupName, caller) }
    }

    /// Removes the item; false when there was none.
    package func delete(_ identity: ItemIdentity) throws(KeychainError) -> Bool {
        try authorize(.delete, group: identity.accessGroup)
        if deviceMayLock() {
            // A missing or damaged item protects nothing: removing a damaged one is its remedy.
            let protection = (try? store.protection(of: identity)) ?? nil
            try authorizeDelete(
                group: identity.accessGroup, accessibilities: protection.map { [$0.protection.accessibility] } ?? [])
        }
        return try store.delete(identity)
    }

    /// Removes every item of a service and access group; how many there were.
    package func deleteAll(service: String, accessGroup: String) throws(KeychainError) -> Int {
        try authorize(.delete, group: accessGroup)
        if deviceMayLock() {
            let items = (try? store.list(service: service, accessGroup: accessGroup)) ?? []
            try authorizeDelete(group: accessGroup, accessibilities: items.map(\.accessibility))
        }
        return try store.deleteAll(service: service, accessGroup: accessGroup)
    }
}

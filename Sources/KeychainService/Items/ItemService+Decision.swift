import KeychainStore
package import KeychainVocabulary
import WireFormat

// The door's half of the one decision point: every item operation of the service describes what
// it touches and asks AccessDecision for the service's caller before it acts. Faces describe
// their caller when they make the service, and nothing else.
extension ItemService {
    /// Returns when the caller may do `operation` to items of `group`.
    ///
    /// - Parameter locked: whether the keychain is locked for the item (``isLocked(for:device:)``):
    ///   known to writes and deletes of items bound to the lock state, which ask the TPM for it.
    ///
    /// The store's owner is not part of the target: the engine has already refused a store whose
    /// files belong to someone this process may not act for (and a shared store is shared on
    /// purpose). Reads of an item bound to the lock state are refused by the TPM itself, the key
    /// record's policy on the lock state, which no decision in software could stand in for.
    ///
    /// - Throws: ``KeychainError`` `.missingEntitlement` for a group the caller is not entitled
    ///   to, `.permissionDenied` for a caller the rules do not allow, `.interactionNotAllowed`
    ///   while locked.
    ///
    /// A decision for a peer of a face that serves other programs goes to the keychain's audit
    /// trail, when it keeps one (``AuditTrail``), refusals included.
    ///
    /// - Parameter item: the one item the operation is on, which an item's grants name.
    func authorize(
        _ operation: AccessOperation, group: String, locked: Bool = false, item: ItemQueryResult? = nil
    ) throws(KeychainError) {
        // Grants and the trail concern the peers of faces that serve other programs, for
        // everything but metadata: only then is the store's policy read (once per decision).
        let served = caller.face.isNamedByGrants && caller.source == .peerCredentials && operation != .readMetadata
        let storePolicy = served ? try policy() : nil
        let used: Grant?
        do throws(AccessRefusal) {
            used = try AccessDecision.decide(
                operation, by: caller,
                on: AccessTarget(
                    accessGroup: group, locked: locked, grants: storePolicy?.grants ?? [], item: item?.reference))
        } catch {
            if storePolicy?.keepsAuditTrail == true {
                try audit(
                    AuditTrail.line(
                        operation, by: caller, on: describe(item),
                        outcome: AuditTrail.outcome(granted: nil, refusal: error)))
            }
            throw KeychainError(refusal: error)
        }
        if storePolicy?.keepsAuditTrail == true {
            try audit(
                AuditTrail.line(
                    operation, by: caller, on: describe(item), outcome: AuditTrail.outcome(granted: used, refusal: nil))
            )
        }
        if let used { try useUp(used) }
    }

    /// What an operation touched, for the audit trail: the item by its label (or service and
    /// account), quoted.
    private func describe(_ item: ItemQueryResult?) -> String {
        guard let item else { return "keychain=" + DisplayText.quoted(location.path, limit: 300) }
        let attributes = item.attributes
        let name =
            attributes.string(AttributeTag.label)
            ?? "\(attributes.string(AttributeTag.service) ?? "") (\(attributes.string(AttributeTag.account) ?? ""))"
        return "keychain=" + DisplayText.quoted(location.path, limit: 300) + " item="
            + DisplayText.quoted(name, limit: 200)
    }

    /// As ``authorize(_:group:)`` for the group a search names; a search that names none is
    /// answered with what the caller may see (``visible(_:)``).
    func authorize(_ operation: AccessOperation, namedIn matching: AttributeList) throws(KeychainError) {
        guard let group = matching.string(AttributeTag.accessGroup) else { return }
        try authorize(operation, group: group)
    }

    /// Whether the caller may see the item at all: a search never shows another group's items to
    /// a caller that is not entitled to them.
    func visible(_ result: ItemQueryResult) -> Bool {
        AccessDecision.sees(result.attributes.string(AttributeTag.accessGroup) ?? "", caller)
    }

    /// Whether the keychain is locked for an item of `accessibility` now: the login session's
    /// lock, or the device's lock state (one NV read). Only a device with a passcode locks: the
    /// caller checks that first, with a file read, so that a device without one asks no TPM.
    func isLocked(for accessibility: Accessibility, device: Device) throws(KeychainError) -> Bool {
        let requirement = accessibility.lockRequirement
        guard requirement != .none else { return false }
        if location.sessionIsLocked(for: accessibility) { return true }
        return try !device.lockSatisfies(requirement)
    }

    /// Whether the device has a passcode, so can be locked: a file read. A device that cannot be
    /// asked (its TPM gone since the store opened) counts as one without: refusing a delete while
    /// locked is iOS's behaviour, not a protection (the files are the user's to remove), and a
    /// removal must not wait for a TPM that a plain item does not need.
    func deviceMayLock() -> Bool {
        (try? Devices.passcodeIsSet(location)) ?? false
    }

    /// Decides a delete of items of `accessibilities` in `group` on a device that may lock
    /// (``deviceMayLock()``): while the keychain is locked for one of them, none is removed
    /// (iOS: errSecInteractionNotAllowed). One TPM read at most.
    func authorizeDelete(group: String, accessibilities: [Accessibility]) throws(KeychainError) {
        let bound = accessibilities.filter { $0.lockRequirement != .none }
        guard !bound.isEmpty else { return try authorize(.delete, group: group) }
        // .unlocked asks more of the lock state than .unlockedSinceBoot: the strictest decides.
        let strictest = bound.first { $0.lockRequirement == .unlocked } ?? bound[0]
        let locked = try Devices.with(location) { (device) throws(KeychainError) in
            try isLocked(for: strictest, device: device)
        }
        try authorize(.delete, group: group, locked: locked)
    }

    /// Decides a write over an existing item without opening it (a new value for a lock-bound
    /// item needs only its record's public half): refused while the keychain is locked for the
    /// item, as iOS refuses an update then. A new item is not refused: adding while locked works
    /// on iOS. A file read when the device may lock, nothing otherwise.
    func authorizeRewrite(_ itemClass: ItemClass, primary: AttributeList) throws(KeychainError) {
        guard deviceMayLock(), let existing = try? store.item(itemClass, primary: primary, withSecret: false),
            existing.isProtected, existing.accessibility.lockRequirement != .none
        else { return }
        let locked = try Devices.with(location) { (device) throws(KeychainError) in
            try isLocked(for: existing.accessibility, device: device)
        }
        try authorize(.write, group: Self.group(of: primary), locked: locked)
    }

    /// This service for the same caller held to `accessGroups` ("" for items of none); itself
    /// when nil. An import given a list of groups writes through it.
    package func entitled(to accessGroups: Set<String>?) -> ItemService {
        guard let accessGroups else { return self }
        let restricted = AccessCaller(
            face: caller.face, uid: caller.uid, source: caller.source, accessGroups: accessGroups.sorted(),
            executable: caller.executable)
        return ItemService(location: location, caller: restricted, openedStore: openedStore)
    }

    /// The access group a primary key names; "" for none.
    /// Whether this caller may write an item with `attributes` (its access group), decided as a
    /// write of it would be: what an importer asks before it plans an item.
    package func mayWrite(_ attributes: AttributeList) -> Bool {
        (try? authorize(.write, group: Self.group(of: attributes))) != nil
    }

    static func group(of attributes: AttributeList) -> String {
        attributes.string(AttributeTag.accessGroup) ?? ""
    }
}

extension KeychainError {
    /// A refusal of the decision point, as every face's error.
    package init(refusal: AccessRefusal) {
        switch refusal {
        case .notOwner(let uid, let owner):
            self.init(.permissionDenied, "This keychain belongs to uid \(owner); uid \(uid) may not use it")
        case .notEntitled(let group):
            self.init(.missingEntitlement, "This program is not entitled to the access group \"\(group)\"")
        case .notAllowed(let executable):
            self.init(
                .permissionDenied, "The rules of this keychain do not allow \(executable ?? "an unknown program")")
        case .locked:
            self.init(.interactionNotAllowed, "The keychain is locked: unlock it with the device passcode")
        case .denied(let grant):
            self.init(
                .permissionDenied,
                "A grant of this keychain denies \(grant.subject.description) (tpm-keychain grants list shows it, grants revoke \(grant.id) lifts it)"
            )
        }
    }
}

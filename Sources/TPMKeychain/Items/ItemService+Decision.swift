import KeychainStore
package import KeychainVocabulary

// The door's half of the one decision point: every item operation of the service describes what
// it touches and asks AccessDecision for the service's caller before it acts. Faces describe
// their caller when they make the service, and nothing else.
extension ItemService {
    /// Returns when the caller may do `operation` to items of `group`.
    ///
    /// The store's owner is not part of the target: the engine has already refused a store whose
    /// files belong to someone this process may not act for (and a shared store is shared on
    /// purpose). Reads of an item bound to the lock state are refused by the TPM itself, the key
    /// record's policy on the lock state, which no decision in software could stand in for.
    ///
    /// - Throws: ``KeychainError`` `.missingEntitlement` for a group the caller is not entitled
    ///   to, `.permissionDenied` for a caller the rules do not allow, `.interactionNotAllowed`
    ///   while locked.
    func authorize(_ operation: AccessOperation, group: String) throws(KeychainError) {
        do throws(AccessRefusal) {
            try AccessDecision.decide(operation, by: caller, on: AccessTarget(accessGroup: group))
        } catch {
            throw KeychainError(refusal: error)
        }
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

    /// This service for the same caller held to `accessGroups` ("" for items of none); itself
    /// when nil. An import given a list of groups writes through it.
    package func entitled(to accessGroups: Set<String>?) -> ItemService {
        guard let accessGroups else { return self }
        let restricted = AccessCaller(
            face: caller.face, uid: caller.uid, source: caller.source, accessGroups: accessGroups.sorted(),
            executable: caller.executable)
        return ItemService(location: location, caller: restricted, store: store)
    }

    /// The access group a primary key names; "" for none.
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
        }
    }
}

package import KeychainService
package import KeychainVocabulary

/// Writes incoming items (an archive's, another keyring's) into a store under a conflict
/// policy: one item at a time, each write whole, so an import stopped anywhere has written a
/// prefix of what it was given.
///
/// Which access groups an import may write is its caller's entitlement: the service's caller
/// names them (``AccessCaller/accessGroups``, "" for items of none), and an item the decision
/// point would refuse is skipped as ``KeychainArchive/SkipReason/otherAccessGroup``.
package struct ItemImporter: Sendable {
    package let service: ItemService
    package let conflicts: KeychainArchive.ConflictPolicy

    package init(service: ItemService, conflicts: KeychainArchive.ConflictPolicy) {
        self.service = service
        self.conflicts = conflicts
    }

    /// What writing `item` would do now.
    package func plan(_ item: TransferItem) throws(KeychainError) -> KeychainArchive.PlannedChange {
        let (action, reason, _) = try decide(item)
        return KeychainArchive.PlannedChange(item: item.summary, action: action, reason: reason)
    }

    /// Writes `item` as the policy says.
    ///
    /// - Returns: what was done, and why for a skip.
    /// - Throws: ``KeychainError`` from the write (`.invalidParameter` for an item over the
    ///   store's limits, `.storageFailed`, `.timedOut`).
    @discardableResult
    package func write(
        _ item: TransferItem
    ) throws(KeychainError) -> (KeychainArchive.Action, KeychainArchive.SkipReason?) {
        var changes = AttributeChanges()
        // The item's own dates: an import is not a change of the secret.
        changes.modificationDate = item.attributes.nanoseconds(AttributeTag.modificationDate)
        func written(_ attributes: AttributeList, _ mode: ItemWriteMode) throws(KeychainError) {
            try service.write(
                item.itemClass, primary: attributes, mode: mode, value: item.value, changes: changes,
                control: AccessControl(unconstrained: item.accessibility))
        }
        if conflicts == .skip {
            if let refusal = refusal(item) { return (.skip, refusal) }
            // The write finds an existing item itself: no separate look first.
            do {
                try written(item.attributes, .add)
                return (.add, nil)
            } catch  where error.code == .duplicateItem {
                return (.skip, .alreadyPresent)
            }
        }
        let (action, reason, attributes) = try decide(item)
        guard action != .skip else { return (action, reason) }
        try written(attributes, action == .replace ? .upsert : .add)
        return (action, nil)
    }

    /// Why an incoming item is refused whatever the store holds.
    private func refusal(_ item: TransferItem) -> KeychainArchive.SkipReason? {
        if item.value.kind == .tpmKey { return .livesInTPM }
        if !service.mayWrite(item.attributes) {
            return .otherAccessGroup
        }
        if item.itemClass == .genericPassword,
            item.attributes.string(AttributeTag.service) == ItemIdentity.secretServiceCollectionService
        {
            return .collectionSettings
        }
        if item.accessibility.isThisDeviceOnly { return .thisDeviceOnly }
        return nil
    }

    private func decide(
        _ item: TransferItem
    ) throws(KeychainError) -> (KeychainArchive.Action, KeychainArchive.SkipReason?, AttributeList) {
        if let refusal = refusal(item) { return (.skip, refusal, item.attributes) }
        guard let existing = try service.item(item.itemClass, primary: item.attributes, withSecret: false) else {
            return (.add, nil, item.attributes)
        }
        switch conflicts {
        case .replace:
            if try service.needsPerson(existing) || ItemService.holdsTPMKey(existing) {
                return (.skip, .protectedHere, item.attributes)
            }
            return (.replace, nil, item.attributes)
        case .keepBoth:
            guard item.itemClass == .genericPassword || item.itemClass == .internetPassword else {
                return (.skip, .alreadyPresent, item.attributes)
            }
            let account = item.attributes.string(AttributeTag.account) ?? ""
            for number in 1...100 {
                var renamed = item.attributes
                renamed.setString(
                    account + (number == 1 ? " (imported)" : " (imported \(number))"), for: AttributeTag.account)
                if try service.item(item.itemClass, primary: renamed, withSecret: false) == nil {
                    return (.keepBoth, nil, renamed)
                }
            }
            return (.skip, .alreadyPresent, item.attributes)
        default:
            return (.skip, .alreadyPresent, item.attributes)
        }
    }
}

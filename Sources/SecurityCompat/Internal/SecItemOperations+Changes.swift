import KeychainVocabulary
import TPMKeychain

// SecItemUpdate and SecItemDelete: every match changed or removed, as iOS does.
extension SecItemOperations {
    static func update(_ request: SecItemRequest, _ changes: SecItemRequest) throws(SecStatus) {
        // "The query dictionary for update can't contain Item return result keys"; search keys neither.
        guard !request.hasReturnKeys, !request.hasMatchKeys, !changes.hasReturnKeys, !changes.hasMatchKeys else {
            throw SecStatus(errSecParam)
        }
        if let group = changes.accessGroup { try requireEntitlement(.write, in: group) }
        let items = try itemService()
        let found = try matches(request, items: items)
        guard !found.isEmpty else { throw SecStatus(errSecItemNotFound) }
        var control = changes.accessControl
        if control == nil, let accessibility = changes.accessibility {
            control = try mapped { () throws(KeychainError) in try AccessControl(accessibility) }
        }
        if changes.valueData != nil || control != nil, found.contains(where: { $0.kind == .tpmKey }) {
            throw SecStatus(errSecParam) // a TPM key's value and protection were fixed when the TPM made it
        }
        for result in found {
            var updated = result.attributes
            try AttributeCoding.apply(changes.attributes, to: &updated, itemClass: result.itemClass)
            if let group = changes.accessGroup { updated.setString(group, for: AttributeTag.accessGroup) }
            switch changes.synchronizable {
            case .yes: updated.setBool(true, for: AttributeTag.synchronizable)
            case .no: updated[AttributeTag.synchronizable] = nil
            default: break
            }
            let newValue = changes.valueData.map { ItemValue(kind: .data, bytes: Array($0)) }
            let samePrimary =
                result.itemClass.encodedPrimaryKey(of: updated)
                == result.itemClass.encodedPrimaryKey(of: result.attributes)
            // Keeping the secret of a protected item (or moving it to another primary key) opens it.
            let needsOldSecret = newValue == nil && (!samePrimary || control != nil)
            let key = newValue == nil ? try openedKey(for: result, request, items: items) : nil
            if samePrimary {
                try write(
                    result.itemClass, primary: updated, mode: .update, value: newValue, control: control, items: items,
                    context: request.context, key: key)
            } else {
                var value = newValue
                if value == nil, needsOldSecret {
                    value = try mapped { () throws(KeychainError) in try items.secret(of: result, key: key) }.map {
                        ItemValue(kind: result.kind, bytes: $0)
                    }
                }
                var newControl = control
                if newControl == nil { newControl = try existingControl(result, items: items) }
                try write(
                    result.itemClass, primary: updated, mode: .add, value: value, control: newControl,
                    items: items, context: request.context)
                _ = try mapped { () throws(KeychainError) in
                    try items.delete(result.itemClass, primary: result.attributes)
                }
            }
        }
    }

    private static func existingControl(
        _ result: ItemQueryResult, items: ItemService
    ) throws(SecStatus) -> AccessControl? {
        if let control = try mapped({ () throws(KeychainError) in try items.accessControl(of: result) }) {
            return control
        }
        return try? AccessControl(result.accessibility)
    }

    // MARK: Delete

    static func delete(_ request: SecItemRequest) throws(SecStatus) {
        if request.isIdentity { return try CertificateItems.deleteIdentities(request) }
        // kSecMatchLimitAll is accepted (macOS accepts it; wrappers send it on every non-iOS
        // platform); every match is deleted whatever the limit.
        var all = request
        all.limit = nil
        let items = try itemService()
        let found = try matches(all, items: items)
        var deleted = 0
        for result in found
        where try mapped({ () throws(KeychainError) in try items.delete(result.itemClass, primary: result.attributes) })
        {
            deleted += 1
        }
        guard deleted > 0 else { throw SecStatus(errSecItemNotFound) }
    }
}

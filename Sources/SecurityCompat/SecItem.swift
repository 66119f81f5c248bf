// swift-format-ignore-file: AlwaysUseLowerCamelCase
// Apple's names, kept as Apple spells them so that ported code compiles unchanged.

/// Adds an item, as Apple's SecItemAdd: errSecDuplicateItem when one with the same primary key
/// exists, errSecMissingEntitlement for an access group not in
/// `KeychainEnvironment.accessGroups`, errSecUnimplemented for keys, certificates and identities.
@discardableResult
public func SecItemAdd(_ attributes: CFDictionary, _ result: UnsafeMutablePointer<CFTypeRef?>?) -> OSStatus {
    SecItemCall.run(result) { () throws(SecStatus) in try SecItemOperations.add(try SecItemRequest(attributes)) }
}

/// Finds items, as Apple's SecItemCopyMatching: the first match unless kSecMatchLimit says more;
/// data, a persistent reference, an attributes dictionary or an array of them, as the return
/// keys ask; nothing returned (only the status) without a return key; errSecItemNotFound when
/// nothing matches. A protected item's data asks the person through kSecUseAuthenticationContext
/// (or a context made for the call).
@discardableResult
public func SecItemCopyMatching(_ query: CFDictionary, _ result: UnsafeMutablePointer<CFTypeRef?>?) -> OSStatus {
    SecItemCall.run(result) { () throws(SecStatus) in try SecItemOperations.copyMatching(try SecItemRequest(query)) }
}

/// Changes every matching item, as Apple's SecItemUpdate: errSecItemNotFound when nothing
/// matches, errSecParam for return or search keys in the query.
@discardableResult
public func SecItemUpdate(_ query: CFDictionary, _ attributesToUpdate: CFDictionary) -> OSStatus {
    SecItemCall.run(nil) { () throws(SecStatus) -> AnyObject? in
        try SecItemOperations.update(try SecItemRequest(query), try SecItemRequest(attributesToUpdate))
        return nil
    }
}

/// Deletes every matching item, as Apple's SecItemDelete (kSecMatchLimitAll accepted, as on
/// macOS): errSecItemNotFound when nothing matched.
@discardableResult
public func SecItemDelete(_ query: CFDictionary) -> OSStatus {
    SecItemCall.run(nil) { () throws(SecStatus) -> AnyObject? in
        try SecItemOperations.delete(try SecItemRequest(query))
        return nil
    }
}

enum SecItemCall {
    static func run(_ result: UnsafeMutablePointer<CFTypeRef?>?, _ body: () throws(SecStatus) -> AnyObject?) -> OSStatus
    {
        result?.pointee = nil
        do {
            let value = try body()
            result?.pointee = value
            return errSecSuccess
        } catch {
            return error.status
        }
    }
}

import TPMKeychain

/// SecItem as a caller of the one decision point (`AccessDecision`): its entitled access groups
/// are what iOS takes from the app's entitlements. SecItem decides nothing itself; it asks.
extension SecItemOperations {
    /// This process, as SecItem's caller.
    static var caller: AccessCaller {
        AccessCaller(face: .secItem, accessGroups: KeychainEnvironment.accessGroups)
    }

    /// errSecMissingEntitlement unless `caller` may do `operation` to items of `group`.
    static func requireEntitlement(
        _ operation: AccessOperation, in group: String, caller: AccessCaller = caller
    ) throws(SecStatus) {
        do throws(AccessRefusal) {
            try AccessDecision.decide(operation, by: caller, on: AccessTarget(accessGroup: group))
        } catch {
            throw SecStatus(errSecMissingEntitlement)
        }
    }

    /// Whether `caller` may do `operation` to items of `group`.
    static func isEntitled(_ operation: AccessOperation, in group: String, caller: AccessCaller = caller) -> Bool {
        (try? requireEntitlement(operation, in: group, caller: caller)) != nil
    }
}

import TPMKeychain

/// SecItem as a caller of the one decision point (`AccessDecision`): its entitled access groups
/// are what iOS takes from the app's entitlements. The item service decides every operation for
/// this caller; SecItem decides nothing itself.
extension SecItemOperations {
    /// This process, as SecItem's caller: entitled to its groups, the first being where new items
    /// go, and to items of no group (""), which the Keychain API and the tools write and every
    /// program of the user has always been able to find through SecItem.
    static var caller: AccessCaller {
        AccessCaller(face: .secItem, accessGroups: KeychainEnvironment.accessGroups + [""])
    }

    /// errSecMissingEntitlement unless `caller` may do `operation` to items of `group`: asked of the
    /// decision point before work that would come first otherwise (making a key in the TPM,
    /// opening a protected item to move it), so that a refused call prompts nobody and makes
    /// nothing. The service asks again when it acts.
    static func requireEntitlement(
        _ operation: AccessOperation, in group: String, caller: AccessCaller = caller
    ) throws(SecStatus) {
        do throws(AccessRefusal) {
            try AccessDecision.decide(operation, by: caller, on: AccessTarget(accessGroup: group))
        } catch {
            throw SecStatus(errSecMissingEntitlement)
        }
    }
}

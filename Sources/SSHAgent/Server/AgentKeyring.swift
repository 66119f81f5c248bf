import Crypto
package import TPMKeychain

/// The keychain's SSH keys as the agent offers them: the TPM key items whose application tag is
/// `ssh` (`tpm-keychain key create --label NAME --tag ssh`), each listed by its label. Every list
/// and every signature goes through the service's door for the connection's caller, so the
/// decision point (AccessDecision) and the key's own access control decide, not the agent.
package struct AgentKeyring: Sendable {
    /// The application tag that offers a key to SSH clients.
    package static let sshTag: [UInt8] = Array("ssh".utf8)

    package let location: KeychainLocation

    package init(location: KeychainLocation) {
        self.location = location
    }

    /// One key the agent offers.
    struct Offered {
        let result: ItemQueryResult
        let publicKey: [UInt8]
        let comment: String
    }

    /// The keys offered to `caller`, in creation order.
    func keys(for caller: AccessCaller) throws(KeychainError) -> [Offered] {
        let service = try ItemService(location: location, caller: caller)
        var matching = AttributeList()
        matching[AttributeTag.applicationTag] = Self.sshTag
        return try service.query(ItemQuery(itemClass: .key, matching: matching, synchronizable: .any)).compactMap {
            result in
            // A public key item of the same key (SecKey keeps both) is not another identity.
            guard ItemService.holdsTPMKey(result), let publicKey = Self.publicKey(of: result) else { return nil }
            return Offered(
                result: result, publicKey: publicKey, comment: result.attributes.string(AttributeTag.label) ?? "")
        }
    }

    /// The public key of a TPM key item, kept in its attributes (readable without a person).
    static func publicKey(of result: ItemQueryResult) -> [UInt8]? {
        guard let key = result.attributes[AttributeTag.publicKey], key.count == 65, key.first == 4 else {
            return nil
        }
        return key
    }

    /// Signs `data` with the offered key whose blob is `blob`, for `caller`: an ECDSA P-256
    /// signature over SHA-256(data), made by the TPM.
    ///
    /// - Returns: nil when no offered key has that blob.
    /// - Throws: ``KeychainError``: `.interactionNotAllowed` for a key that needs a person or
    ///   while the keychain is locked for it, `.itemInvalidated` after re-enrollment, what the
    ///   decision point refuses.
    func sign(_ data: [UInt8], withKeyBlob blob: [UInt8], for caller: AccessCaller) throws(KeychainError) -> [UInt8]? {
        guard let wanted = SSHECDSAKey.publicKey(ofBlob: blob),
            let key = try keys(for: caller).first(where: { $0.publicKey == wanted })
        else { return nil }
        let service = try ItemService(location: location, caller: caller)
        // A key bound to the lock state opens without a person; one that needs a person
        // (biometry, the passcode) is refused until the agent can ask.
        return try service.signNeedingNoPerson(digest: Array(SHA256.hash(data: data)), with: key.result)
    }
}

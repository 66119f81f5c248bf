import Crypto
import Dispatch
import SystemCalls
package import TPMKeychain
import WireFormat

/// The keychain's SSH keys as the agent offers them: the TPM key items whose application tag is
/// `ssh` (`tpm-keychain key create --label NAME --tag ssh`), each listed by its label. Every list
/// and every signature goes through the service's door for the connection's caller, so the
/// decision point (AccessDecision) and the key's own access control decide, not the agent.
package struct AgentKeyring: Sendable {
    /// The application tag that offers a key to SSH clients.
    package static let sshTag: [UInt8] = Array("ssh".utf8)

    package let location: KeychainLocation
    /// Who asks the person for a key that needs biometry (fprintd) or the passcode (a command);
    /// nil each: such keys are refused.
    package let authenticator: (any Authenticator)?
    package let passcode: PasscodeSource?

    package init(
        location: KeychainLocation, authenticator: (any Authenticator)? = nil, passcode: PasscodeSource? = nil
    ) {
        self.location = location
        self.authenticator = authenticator
        self.passcode = passcode
    }

    /// The store's name: its directory's (`default` for the default store).
    var storeName: String {
        String(location.path.split(separator: "/").last ?? "default")
    }

    /// One key the agent offers.
    struct Offered {
        let result: ItemQueryResult
        let publicKey: [UInt8]
        let comment: String
    }

    /// The keys offered to `caller`, in creation order.
    func keys(for caller: AccessCaller) throws(KeychainError) -> [Offered] {
        try Self.keys(in: try ItemService(location: location, caller: caller))
    }

    private static func keys(in service: ItemService) throws(KeychainError) -> [Offered] {
        var matching = AttributeList()
        matching[AttributeTag.applicationTag] = sshTag
        return try service.query(ItemQuery(itemClass: .key, matching: matching, synchronizable: .any)).compactMap {
            result in
            // A public key item of the same key (SecKey keeps both) is not another identity.
            guard ItemService.holdsTPMKey(result), let publicKey = publicKey(of: result) else { return nil }
            return Offered(
                result: result, publicKey: publicKey, comment: result.attributes.string(AttributeTag.label) ?? "")
        }
    }

    /// A certificate of an offered key: an identity, as PKCS#11 and SecItem pair them.
    package struct Certificate: Equatable, Sendable {
        /// The key's SSH public key blob, naming which offered key the certificate is for.
        package let keyBlob: [UInt8]
        package let der: [UInt8]
        /// The DER distinguished names and the serial number's content octets, as the
        /// certificate item keeps them (derived when it was stored).
        package let subject: [UInt8]
        package let issuer: [UInt8]
        package let serialNumber: [UInt8]
    }

    /// The certificates of the keys offered to `caller`: each certificate item whose public key
    /// hash (kSecAttrPublicKeyHash) is an offered key's (`tpm-keychain key add-certificate`).
    /// A certificate is public: reading one needs no person, and a protected one is skipped.
    func certificates(for caller: AccessCaller) throws(KeychainError) -> [Certificate] {
        let service = try ItemService(location: location, caller: caller)
        var found: [Certificate] = []
        for key in try Self.keys(in: service) {
            var matching = AttributeList()
            matching[AttributeTag.publicKeyHash] = Array(Insecure.SHA1.hash(data: key.publicKey))
            for item in try service.query(.certificate, matching: matching) where !item.isProtected {
                guard let der = try service.secret(of: item, key: nil), !der.isEmpty else { continue }
                found.append(
                    Certificate(
                        keyBlob: SSHECDSAKey.blob(publicKey: key.publicKey), der: der,
                        subject: item.attributes[AttributeTag.subject] ?? [],
                        issuer: item.attributes[AttributeTag.issuer] ?? [],
                        serialNumber: item.attributes[AttributeTag.serialNumber] ?? []))
            }
        }
        return found
    }

    /// The public key of a TPM key item, kept in its attributes (readable without a person).
    static func publicKey(of result: ItemQueryResult) -> [UInt8]? {
        guard let key = result.attributes[AttributeTag.publicKey], key.count == 65, key.first == 4 else {
            return nil
        }
        return key
    }

    /// Signs `data` with the offered key whose blob is `blob`, for `caller` (`requester` names it
    /// to the person: the program, its pid and chain, as ``CallerIdentity`` reads them): an
    /// ECDSA P-256 signature over SHA-256(data), made by the TPM. A key that needs a person is
    /// opened by asking them (biometry, the passcode), with the key and the program named.
    ///
    /// - Returns: nil when no offered key has that blob.
    /// - Throws: ``KeychainError``: `.interactionNotAllowed` for a key that needs a person when
    ///   the agent has nobody to ask, and while the keychain is locked for a lock-bound key;
    ///   `.userCanceled`, `.authenticationFailed`, `.lockout` from the person's answer;
    ///   `.itemInvalidated` after re-enrollment; what the decision point refuses.
    func sign(
        _ data: [UInt8], withKeyBlob blob: [UInt8], for caller: AccessCaller, requester: String,
        destination: String? = nil
    ) throws(KeychainError) -> [UInt8]? {
        try sign(
            digest: Array(SHA256.hash(data: data)), withKeyBlob: blob, for: caller, requester: requester,
            destination: destination)
    }

    /// As ``sign(_:withKeyBlob:for:requester:destination:)`` over a SHA-256 digest the caller made (PKCS#11's
    /// CKM_ECDSA, through the `sign-digest@tpm-keychain` extension).
    ///
    /// - Throws: as ``sign(_:withKeyBlob:for:requester:destination:)``; `.invalidParameter` for a digest that is
    ///   not 32 bytes.
    ///
    /// - Parameter destination: where the client's session goes (a bound host key), for the person.
    func sign(
        digest: [UInt8], withKeyBlob blob: [UInt8], for caller: AccessCaller, requester: String,
        destination: String? = nil
    ) throws(KeychainError) -> [UInt8]? {
        guard digest.count == 32 else {
            throw KeychainError(.invalidParameter, "A digest to sign is 32 bytes (SHA-256), not \(digest.count)")
        }
        guard let wanted = SSHECDSAKey.publicKey(ofBlob: blob) else { return nil }
        // One service for the search and the signature: the caller is decided for both.
        let service = try ItemService(location: location, caller: caller)
        guard let key = try Self.keys(in: service).first(where: { $0.publicKey == wanted }) else { return nil }
        guard try service.needsAPerson(key.result) else {
            // Under the master key, or bound to the lock state only: the TPM decides, nobody is asked.
            return try service.signNeedingNoPerson(digest: digest, with: key.result)
        }
        guard authenticator != nil || passcode != nil else {
            throw KeychainError(
                .interactionNotAllowed,
                "The key needs biometry or the device passcode, and the agent has no way to ask (start it with --passcode-command or --fprintd)"
            )
        }
        let context = AuthenticationContext(authenticator: authenticator, passcode: passcode, location: location)
        context.localizedReason =
            "Sign with the SSH key \(DisplayText.quoted(key.comment, limit: 100)) for \(requester)"
            + (destination.map { ", to \($0)" } ?? "")
        let opened = try SynchronousWait.run { () async throws(KeychainError) -> ItemService.OpenedKey? in
            try await service.openKey(for: key.result, context: context)
        }
        return try service.sign(digest: digest, with: key.result, key: opened)
    }
}

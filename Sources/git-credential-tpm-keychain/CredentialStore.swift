import FoundationEssentials
import KeychainVocabulary
import TPMKeychain
import ToolSupport

/// git's credentials as internet-password items (kSecClassInternetPassword) of a TPMKeychain
/// store, in the access group ``accessGroup``.
///
/// Attributes, as SecItem writes them, so SecItem code with that access group sees the same
/// items: `srvr` the host without its port, `port` (a number, 0 for none), `ptcl` (Apple's code
/// for the protocols git-credential-osxkeychain maps, https is `htps`; any other protocol as git
/// names it), `path` when git gives one, `acct` the username. The secret (``StoredSecret``: the
/// password, `password_expiry_utc`, `oauth_refresh_token`) is the item's value, encrypted as every
/// value is; none of it is an attribute.
///
/// This works through the item service every face uses (TPMKeychain's `ItemService`) and
/// ToolSupport's ``InternetPasswordAttributes`` (which `tpm-keychain`'s `*-internet-password`
/// verbs share), rather than through the SecItem functions: errors keep their message (a store
/// sealed by another TPM, a damaged file) where SecItem would reduce them to an OSStatus; a store
/// is one locked upsert by primary key, an erase deletes exactly the items it matched, and no
/// process-wide `KeychainEnvironment` is set.
struct CredentialStore {
    /// The namespace of git's credentials inside a store (kSecAttrAccessGroup).
    static let accessGroup = "git-credential"

    private let items: ItemService

    /// Opens the store (one TPM unseal).
    ///
    /// - Throws: ``KeychainError`` from opening the store.
    init(location: KeychainLocation) throws(KeychainError) {
        items = try ItemService(location: location, caller: AccessCaller(face: .gitHelper))
    }

    // MARK: get

    /// Whether `query` names something to look up: git always sends a host, or a certificate's
    /// path; without either, any credential would do, and none is given.
    static func isLookup(_ query: GitCredential) -> Bool {
        query.server != nil || query.path != nil
    }

    /// The best stored credential for `query`, as the lines of a `get` answer; nil for none.
    ///
    /// Every attribute git gives must match (the host with its port); the rest match anything. Of
    /// several matches, one stored without a path is preferred when git gave none, then the one
    /// changed last. An expired password counts as absent, and so do items that need a person
    /// to open them (not written by this helper). Items this helper wrote are bound to the lock
    /// state: while the keychain is locked, a match is refused, not passed over.
    ///
    /// - Throws: ``KeychainError`` from the store; `.interactionNotAllowed` while locked.
    func get(_ query: GitCredential) throws(KeychainError) -> CredentialMessage? {
        guard Self.isLookup(query) else { return nil }
        let candidates = try matches(query).sorted { lhs, rhs in
            if query.path == nil {
                let (left, right) = (lhs.attributes[AttributeTag.path] == nil, rhs.attributes[AttributeTag.path] == nil)
                if left != right { return left }
            }
            return (lhs.attributes.nanoseconds(AttributeTag.modificationDate) ?? 0)
                > (rhs.attributes.nanoseconds(AttributeTag.modificationDate) ?? 0)
        }
        for candidate in candidates {
            guard let secret = try secret(of: candidate), !GitCredential.isPast(secret.passwordExpiry) else { continue }
            var answer = CredentialMessage()
            answer.append("username", candidate.attributes[AttributeTag.account] ?? [])
            answer.append("password", Array(secret.password.utf8))
            if let expiry = secret.passwordExpiry { answer.append("password_expiry_utc", Array(String(expiry).utf8)) }
            if let token = secret.oauthRefreshToken { answer.append("oauth_refresh_token", Array(token.utf8)) }
            return answer
        }
        return nil
    }

    // MARK: store

    /// Whether a `store` request is one to keep. What git's own helpers ignore is ignored: no
    /// protocol, no host or path, no username or password (empty ones are kept, as t0303's
    /// "can store empty username" asks), or a password that has expired already.
    static func isStorable(_ credential: GitCredential) -> Bool {
        credential.protocolName != nil && (credential.server != nil || credential.path != nil)
            && credential.username != nil && credential.password != nil
            && !GitCredential.isPast(credential.passwordExpiry)
    }

    /// Stores `credential` (one that ``isStorable(_:)``), replacing the item with the same
    /// protocol, host, port, path and username.
    ///
    /// - Throws: ``HelperFailure`` for a password or refresh token that is not UTF-8;
    ///   ``KeychainError`` from the store.
    func store(_ credential: GitCredential) throws {
        let value = try StoredSecret(credential).encoded
        var primary = attributes(of: credential)
        primary[AttributeTag.server] = credential.server ?? []
        primary[AttributeTag.port] = InternetPasswordAttributes.port(credential.port)
        // Bound to the lock state, as a password in the login keychain is: with a device passcode
        // set, a locked keychain gives git nothing (and without one there is nothing to bind to).
        try items.write(
            .internetPassword, primary: primary, mode: .upsert, value: ItemValue(kind: .json, bytes: value),
            control: try AccessControl(.whenUnlocked))
    }

    // MARK: erase

    /// Whether `pattern` names any of protocol, host, path or username: one that names none would
    /// match every credential, which git never asks for.
    static func isErasePattern(_ pattern: GitCredential) -> Bool {
        pattern.protocolName != nil || pattern.server != nil || pattern.path != nil || pattern.username != nil
    }

    /// Deletes every item matching `pattern` (the attributes it gives must match, the rest match
    /// anything); when it gives a password, only items with that password, as git's t0303 asks
    /// ("does not erase a password distinct from input"). Nothing for a pattern that is not
    /// ``isErasePattern(_:)``.
    ///
    /// - Returns: how many items were deleted.
    /// - Throws: ``KeychainError`` from the store.
    func erase(_ pattern: GitCredential) throws(KeychainError) -> Int {
        guard Self.isErasePattern(pattern) else { return 0 }
        var deleted = 0
        for item in try matches(pattern) {
            if let password = pattern.password {
                guard let secret = try secret(of: item), Self.equal(Array(secret.password.utf8), password) else {
                    continue
                }
            }
            if try items.delete(.internetPassword, primary: item.attributes) { deleted += 1 }
        }
        return deleted
    }

    // MARK: Support

    /// The items of this helper's access group whose attributes equal what `credential` gives.
    private func matches(_ credential: GitCredential) throws(KeychainError) -> [ItemQueryResult] {
        var matching = attributes(of: credential)
        if let server = credential.server {
            matching[AttributeTag.server] = server
            matching[AttributeTag.port] = InternetPasswordAttributes.port(credential.port)
        }
        var found: [ItemQueryResult] = []
        for item in try items.query(.internetPassword, matching: matching, synchronizable: .no)
        where try !items.needsAPerson(item) {
            found.append(item)
        }
        return found
    }

    /// Access group, protocol, path and account, those `credential` gives.
    private func attributes(of credential: GitCredential) -> AttributeList {
        var list = AttributeList()
        list.setString(Self.accessGroup, for: AttributeTag.accessGroup)
        if let name = credential.protocolName { list[AttributeTag.protocol] = Self.protocolCode(name) }
        if let path = credential.path { list[AttributeTag.path] = path }
        if let username = credential.username { list[AttributeTag.account] = username }
        return list
    }

    /// An item's secret; nil when the item went away meanwhile or its value is not this helper's
    /// JSON (written by other SecItem code into the group: skipped, with a note).
    private func secret(of item: ItemQueryResult) throws(KeychainError) -> StoredSecret? {
        guard let bytes = try items.secretNeedingNoPerson(of: item) else { return nil }
        do {
            return try StoredSecret(decoding: bytes)
        } catch {
            printError(
                "\(ProcessGuard.programName): note: skipped an item of server \"\(String(decoding: item.attributes[AttributeTag.server] ?? [], as: UTF8.self))\" whose value is not a stored git credential"
            )
            return nil
        }
    }

    /// Apple's kSecAttrProtocol code for the protocols git-credential-osxkeychain maps; others
    /// are stored as git names them.
    static func protocolCode(_ name: [UInt8]) -> [UInt8] {
        InternetPasswordAttributes.protocolCodes[String(decoding: name, as: UTF8.self)].map { Array($0.utf8) } ?? name
    }

    /// Compares without stopping at the first difference.
    static func equal(_ lhs: [UInt8], _ rhs: [UInt8]) -> Bool {
        guard lhs.count == rhs.count else { return false }
        var difference: UInt8 = 0
        for index in lhs.indices { difference |= lhs[index] ^ rhs[index] }
        return difference == 0
    }
}

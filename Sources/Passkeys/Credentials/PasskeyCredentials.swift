import Crypto
import FoundationEssentials
import SystemCalls
package import TPMKeychain

/// One passkey: a key item of the keychain whose private key the TPM made and keeps (as
/// `tpm-keychain key create` makes them), tagged `passkey`, with the relying party and the user
/// among its attributes, sealed and authenticated like every item's (docs/FORMAT.md, "Passkey
/// credentials").
package struct PasskeyCredential: Sendable, Equatable {
    /// The credential ID the relying party keeps: 32 random bytes, the item's application label.
    package let id: [UInt8]
    package let relyingParty: String
    package let userID: [UInt8]
    package let userName: String?
    package let displayName: String?
    /// The public key, X9.63 (65 bytes).
    package let publicKey: [UInt8]
    package let signCount: UInt32
    package let discoverable: Bool
    /// credProtect's level, 1 to 3.
    package let protection: UInt8
    /// hmac-secret's CredRandom: 32 bytes for assertions with user verification, then 32
    /// without; nil for a credential made without the extension.
    let hmacSecret: [UInt8]?
    let result: ItemQueryResult

    /// Whether the credential's key needs a matching finger of the enrollment it was made under.
    package var isBoundToBiometry: Bool { result.isProtected }
}

/// The keychain's passkeys, read and written through the service for the authenticator's
/// caller: the decision point and each key's access control apply as for every face.
package struct PasskeyCredentials: Sendable {
    package static let tag: [UInt8] = Array("passkey".utf8)
    static let relyingPartyTag = FourCharacterCode("tkfr")
    static let userIDTag = FourCharacterCode("tkfu")
    static let userNameTag = FourCharacterCode("tkfn")
    static let displayNameTag = FourCharacterCode("tkfd")
    static let signCountTag = FourCharacterCode("tkfc")
    static let discoverableTag = FourCharacterCode("tkfk")
    static let protectionTag = FourCharacterCode("tkfp")
    static let hmacSecretTag = FourCharacterCode("tkfh")
    /// A discoverable credential's user entity is at most this long in each field (CTAP 2.1
    /// allows truncation at 64 bytes).
    static let nameLimit = 64

    /// The longest credential ID looked up: ours are 32 bytes.
    static let idLimit = 64

    /// The attributes every passkey's item has: a private P-256 key in the TPM, as `key create`
    /// makes them, of no access group, tagged `passkey`; with the ID, its primary key.
    static var constantAttributes: AttributeList {
        var attributes = AttributeList()
        attributes[AttributeTag.keyClass] = Array("1".utf8)
        attributes[AttributeTag.type] = Array("73".utf8)
        attributes.setUInt32(256, for: AttributeTag.keySizeInBits)
        attributes.setUInt32(256, for: AttributeTag.effectiveKeySize)
        attributes.setString("com.apple.setoken", for: AttributeTag.tokenID)
        attributes.setString("", for: AttributeTag.accessGroup)
        attributes[AttributeTag.applicationTag] = tag
        return attributes
    }

    package let location: KeychainLocation
    package let caller: AccessCaller

    package init(location: KeychainLocation, caller: AccessCaller) {
        self.location = location
        self.caller = caller
    }

    private func service() throws(KeychainError) -> ItemService {
        try ItemService(location: location, caller: caller)
    }

    /// Makes a credential's key in the TPM and stores it.
    package func create(
        relyingParty: String, userID: [UInt8], userName: String?, displayName: String?, discoverable: Bool,
        protection: UInt8, hmacSecret: Bool = false, boundTo enrollment: [UInt8]? = nil
    ) throws(KeychainError) -> PasskeyCredential {
        let id = SystemRandomNumberGenerator.bytes(32)
        var base = Self.constantAttributes
        base[AttributeTag.applicationLabel] = id
        base.setString(relyingParty + (userName.map { " (\($0))" } ?? ""), for: AttributeTag.label)
        base.setString(relyingParty, for: Self.relyingPartyTag)
        base[Self.userIDTag] = userID
        base.setString(userName.map { String($0.utf8.prefix(Self.nameLimit)) ?? "" }, for: Self.userNameTag)
        base.setString(displayName.map { String($0.utf8.prefix(Self.nameLimit)) ?? "" }, for: Self.displayNameTag)
        base.setUInt32(0, for: Self.signCountTag)
        base.setBool(discoverable, for: Self.discoverableTag)
        base[Self.protectionTag] = [protection]
        // Sealed with the item's other attributes, under the master key, like any item's metadata.
        if hmacSecret { base[Self.hmacSecretTag] = SystemRandomNumberGenerator.bytes(64) }
        let items = try service()
        var primary = base
        // Bound to the enrolled fingers: the TPM refuses the key for good once they change.
        let control = try enrollment.map { _ throws(KeychainError) in
            try AccessControl(.whenUnlockedThisDeviceOnly, flags: .biometryCurrentSet)
        }
        _ = try items.createTPMKey(.signing, control: control, enrollment: enrollment) { publicKey in
            primary[AttributeTag.publicKey] = publicKey
            return primary
        }
        guard let stored = try items.item(.key, primary: primary, withSecret: false), let made = Self.credential(stored)
        else { throw KeychainError(.itemNotFound, "The new passkey's item went away") }
        return made
    }

    /// The credentials of `relyingParty`, newest first.
    package func credentials(of relyingParty: String) throws(KeychainError) -> [PasskeyCredential] {
        var matching = AttributeList()
        matching[AttributeTag.applicationTag] = Self.tag
        matching.setString(relyingParty, for: Self.relyingPartyTag)
        // Without values: a biometry-bound key's waits for its finger, and only one is used.
        return try service().query(.key, matching: matching).compactMap(Self.credential).reversed()
    }

    /// Every credential, oldest first.
    package func all() throws(KeychainError) -> [PasskeyCredential] {
        var matching = AttributeList()
        matching[AttributeTag.applicationTag] = Self.tag
        return try service().query(.key, matching: matching).compactMap(Self.credential)
    }

    /// The credential `id` names, if it is of `relyingParty`: read by its primary key, which the
    /// ID and the constant attributes of a passkey make, without listing the store.
    package func credential(_ id: [UInt8], of relyingParty: String) throws(KeychainError) -> PasskeyCredential? {
        guard (1...Self.idLimit).contains(id.count) else { return nil }
        var primary = Self.constantAttributes
        primary[AttributeTag.applicationLabel] = id
        // With its value (the TPM key's blob), which the signature then needs not read again;
        // a biometry-bound key's value waits for its finger.
        let items = try service()
        let found: ItemQueryResult?
        do {
            found = try items.item(.key, primary: primary, withSecret: true)
        } catch  where error.code == .interactionNotAllowed {
            found = try items.item(.key, primary: primary, withSecret: false)
        }
        guard let found,
            let credential = Self.credential(found), credential.relyingParty == relyingParty
        else { return nil }
        return credential
    }

    /// Signs `message` (authData ‖ clientDataHash, made by `message(count)` with the credential's
    /// next sign count) in the TPM: an ES256 signature, DER-encoded as WebAuthn wants it.
    ///
    /// Counts are handed out from blocks reserved durably before use (``SignCounts``): the
    /// credential's `tkfc` is the end of the last block reserved, so no count is ever handed out
    /// twice, whatever crashes, and only one signature in ``SignCounts/block`` writes the item.
    package func sign(
        _ credential: PasskeyCredential, counts: SignCounts, key: ItemService.OpenedKey? = nil,
        message: (UInt32) -> [UInt8]
    ) throws(KeychainError) -> (signature: [UInt8], count: UInt32) {
        let items = try service()
        let count = try counts.next(for: credential) { (current) throws(KeychainError) -> UInt32 in
            // Reserved under a lock with the item read afresh: another authenticator process on
            // this store reserves after this one's block, never inside it.
            let lock: LockFile
            do {
                lock = try LockFile(location.path + "/" + Self.countsLockName)
                _ = try lock.lock(wait: true)
            } catch {
                throw KeychainError(
                    .storageFailed, "The passkeys' count lock in \(location.path) cannot be taken: \(error)")
            }
            defer { withExtendedLifetime(lock) {} }
            let stored =
                try items.item(.key, primary: credential.result.attributes, withSecret: false)
                .flatMap { $0.attributes.uint32(Self.signCountTag) } ?? current
            let start = max(stored, current, 1)
            var changed = credential.result.attributes
            changed.setUInt32(start &+ SignCounts.block, for: Self.signCountTag)
            // A biometry-bound item keeps its value under its record: rewritten with the opened key.
            try items.write(.key, primary: changed, mode: .update, value: nil, key: key)
            return start
        }
        let digest = Array(SHA256.hash(data: message(count)))
        let raw =
            credential.isBoundToBiometry
            ? try items.sign(digest: digest, with: credential.result, key: key)
            : try items.signNeedingNoPerson(digest: digest, with: credential.result)
        do {
            return (Array(try P256.Signing.ECDSASignature(rawRepresentation: raw).derRepresentation), count)
        } catch {
            throw KeychainError(.tampered, "The TPM's signature is not r ‖ s of P-256")
        }
    }

    /// Opens a biometry-bound credential's key: the person's finger (through `context`'s
    /// authenticator), then the TPM, which refuses the key once the enrollment has changed
    /// (`.itemInvalidated`).
    package func open(
        _ credential: PasskeyCredential, context: AuthenticationContext
    ) async throws(KeychainError)
        -> ItemService.OpenedKey?
    {
        try await service().openKey(for: credential.result, context: context)
    }

    /// The lock file, in the store's directory, under which blocks of counts are reserved.
    static let countsLockName = "passkeys.lock"

    /// Replaces the user's name and display name (credential management's updateUserInformation).
    package func updateUser(
        of credential: PasskeyCredential, name: String?, displayName: String?
    ) throws(KeychainError) {
        var changed = credential.result.attributes
        changed.setString(name.map { String($0.utf8.prefix(Self.nameLimit)) ?? "" } ?? "", for: Self.userNameTag)
        changed.setString(
            displayName.map { String($0.utf8.prefix(Self.nameLimit)) ?? "" } ?? "", for: Self.displayNameTag)
        changed.setString(credential.relyingParty + (name.map { " (\($0))" } ?? ""), for: AttributeTag.label)
        try service().write(.key, primary: changed, mode: .update, value: nil)
    }

    package func delete(_ credential: PasskeyCredential) throws(KeychainError) {
        _ = try service().delete(.key, primary: credential.result.attributes)
    }

    private static func credential(_ result: ItemQueryResult) -> PasskeyCredential? {
        let attributes = result.attributes
        guard ItemService.holdsTPMKey(result), let id = attributes[AttributeTag.applicationLabel],
            let relyingParty = attributes.string(relyingPartyTag), let userID = attributes[userIDTag],
            let publicKey = attributes[AttributeTag.publicKey], publicKey.count == 65
        else { return nil }
        let userName = attributes.string(userNameTag)
        let displayName = attributes.string(displayNameTag)
        return PasskeyCredential(
            id: id, relyingParty: relyingParty, userID: userID, userName: userName?.isEmpty == true ? nil : userName,
            displayName: displayName?.isEmpty == true ? nil : displayName, publicKey: publicKey,
            signCount: attributes.uint32(signCountTag) ?? 0, discoverable: attributes.bool(discoverableTag) ?? true,
            protection: attributes[protectionTag]?.first ?? 1,
            hmacSecret: attributes[hmacSecretTag].flatMap { $0.count == 64 ? $0 : nil }, result: result)
    }
}

extension SystemRandomNumberGenerator {
    static func bytes(_ count: Int) -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        return (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
    }
}

/// The sign counts an authenticator process hands out: per credential, the next count and the
/// end of the block it reserved. A block is reserved durably (the credential's `tkfc` moved to
/// its end) before its first count is used, so a count is never reused: after a restart, or in
/// another process, counting goes on from the stored end, skipping what was left of a block,
/// which WebAuthn allows (a count must only grow).
package final class SignCounts: Sendable {
    /// Counts reserved per durable write.
    package static let block: UInt32 = 64
    private let reserved = Locked<[[UInt8]: (next: UInt32, end: UInt32)]>([:])

    package init() {}

    /// The credential's next count; `reserve(from)` reserves a new block durably when the
    /// current one is used up, returning the block's first count.
    func next(
        for credential: PasskeyCredential, reserve: (UInt32) throws(KeychainError) -> UInt32
    ) throws(KeychainError) -> UInt32 {
        let taken = reserved.withLock { blocks -> UInt32? in
            guard var block = blocks[credential.id], block.next < block.end else { return nil }
            defer {
                block.next += 1
                blocks[credential.id] = block
            }
            return block.next
        }
        if let taken { return taken }
        let known = reserved.withLock { $0[credential.id]?.end } ?? 0
        let start = try reserve(max(known, credential.signCount))
        reserved.withLock { $0[credential.id] = (start + 1, start &+ Self.block) }
        return start
    }

    /// Forgets a credential's block (it was deleted, or the authenticator reset).
    func forget(_ id: [UInt8]?) {
        reserved.withLock { blocks in
            if let id { blocks[id] = nil } else { blocks = [:] }
        }
    }
}

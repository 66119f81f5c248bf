import Crypto
import FoundationEssentials
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
        protection: UInt8, hmacSecret: Bool = false
    ) throws(KeychainError) -> PasskeyCredential {
        let id = SystemRandomNumberGenerator.bytes(32)
        var base = AttributeList()
        base[AttributeTag.keyClass] = Array("1".utf8)
        base[AttributeTag.type] = Array("73".utf8)
        base.setUInt32(256, for: AttributeTag.keySizeInBits)
        base.setUInt32(256, for: AttributeTag.effectiveKeySize)
        base.setString("com.apple.setoken", for: AttributeTag.tokenID)
        base.setString("", for: AttributeTag.accessGroup)
        base[AttributeTag.applicationTag] = Self.tag
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
        _ = try items.createTPMKey(.signing, control: nil, enrollment: nil) { publicKey in
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
        return try service().query(.key, matching: matching).compactMap(Self.credential).reversed()
    }

    /// Every credential, oldest first.
    package func all() throws(KeychainError) -> [PasskeyCredential] {
        var matching = AttributeList()
        matching[AttributeTag.applicationTag] = Self.tag
        return try service().query(.key, matching: matching).compactMap(Self.credential)
    }

    /// The credential `id` names, if it is of `relyingParty`.
    package func credential(_ id: [UInt8], of relyingParty: String) throws(KeychainError) -> PasskeyCredential? {
        var matching = AttributeList()
        matching[AttributeTag.applicationTag] = Self.tag
        matching[AttributeTag.applicationLabel] = id
        return try service().query(.key, matching: matching).compactMap(Self.credential).first {
            $0.relyingParty == relyingParty
        }
    }

    /// Moves the credential's signature counter on, durably, then signs `message` (authData ‖
    /// clientDataHash, made by `message(count)` with the new count) in the TPM: an ES256
    /// signature, DER-encoded as WebAuthn wants it.
    package func sign(
        _ credential: PasskeyCredential, message: (UInt32) -> [UInt8]
    ) throws(KeychainError) -> (signature: [UInt8], count: UInt32) {
        let items = try service()
        let count = credential.signCount &+ 1
        var changed = credential.result.attributes
        changed.setUInt32(count, for: Self.signCountTag)
        try items.write(.key, primary: changed, mode: .update, value: nil)
        let digest = Array(SHA256.hash(data: message(count)))
        let raw = try items.signNeedingNoPerson(digest: digest, with: credential.result)
        do {
            return (Array(try P256.Signing.ECDSASignature(rawRepresentation: raw).derRepresentation), count)
        } catch {
            throw KeychainError(.tampered, "The TPM's signature is not r ‖ s of P-256")
        }
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

import WireFormat

/// What a key that lives in the TPM does.
public enum TPMKeyUsage: UInt8, Sendable, Hashable, Codable {
    /// ECDSA signatures (TPM2_Sign).
    case signing = 1
    /// ECDH key agreement (TPM2_ECDH_ZGen).
    case keyAgreement = 2
    /// Both, as an Apple Secure Enclave key does (SecKey, where one key signs and agrees).
    case signingAndKeyAgreement = 3

    /// Whether the key signs.
    public var signs: Bool { self != .keyAgreement }
    /// Whether the key agrees on keys.
    public var agreesOnKeys: Bool { self != .signing }

    /// The public area's sign and decrypt attributes for the usage.
    var roles: ObjectAttributes {
        switch self {
        case .signing: .sign
        case .keyAgreement: .decrypt
        case .signingAndKeyAgreement: [.sign, .decrypt]
        }
    }
}

/// An ECC P-256 key made inside the TPM whose private part never leaves it in clear: what the
/// Secure Enclave keeps on Apple platforms.
///
/// The private area is encrypted and integrity-protected by the storage key, and the key is
/// fixedTPM and fixedParent, so the blob is safe to store anywhere and usable only on the TPM that
/// made it. Every use satisfies the key's policy, as a sealed object's does (``SealedObject``).
///
/// ``serialized()`` produces the "TPM key" format of docs/FORMAT.md (all integers big-endian):
///
///     magic            4 bytes  "TKKY"
///     version          UINT16   1, or 2 for a key under the key-file parent
///     usage            UINT8    1 signing, 2 key agreement, 3 both
///     parentTemplate   UINT8    version 2 only: 1, the key-file parent (empty `unique`)
///     parentAlgorithm  UINT16   TPM_ALG_ID of the storage key: 0x0023 ECC, 0x0001 RSA
///     parentName       UINT16 size + bytes (at most 66): the storage key's name when made
///     public           UINT16 size + bytes: the marshalled TPM2B_PUBLIC
///     private          UINT16 size + bytes: the marshalled TPM2B_PRIVATE
///
/// The public area must describe exactly what ``TPMConnection/createKey(_:policy:authValue:)``
/// makes for the usage: anything else is rejected before the TPM is asked.
public struct TPMKey: StoredTPMObject, Sendable, Hashable {
    static let magic: [UInt8] = Array("TKKY".utf8)
    static let version: UInt16 = 1
    /// The version of keys under ``StorageKeyAlgorithm/eccP256KeyFile``, which older builds refuse
    /// rather than look for under the wrong parent.
    static let keyFileParentVersion: UInt16 = 2
    static let keyFileParentTemplate: UInt8 = 1

    /// What the key does.
    public let usage: TPMKeyUsage
    /// The marshalled TPM2B_PUBLIC.
    public let publicArea: [UInt8]
    /// The marshalled TPM2B_PRIVATE, encrypted by the storage key inside the TPM.
    public let privateArea: [UInt8]
    /// The kind of storage key the key was made under.
    public let storageKeyAlgorithm: StorageKeyAlgorithm
    /// The storage key's name when the key was made; a TPM with another storage key is refused.
    public let storageKeyName: [UInt8]
    /// The policy every use requires, read from the public area.
    public let authPolicy: PolicyDigest
    /// Whether wrong authorization values count toward the TPM's dictionary-attack lockout (a key
    /// made with a PIN).
    public let isDictionaryAttackProtected: Bool
    /// Whether the key also accepts its authorization value in an HMAC session (userWithAuth,
    /// only beside the policy PolicyAuthValue alone).
    public let usableWithAuthValue: Bool
    var acceptsAuthValueAlone: Bool { usableWithAuthValue }
    /// The public key in ANSI X9.63 form (0x04 ‖ x ‖ y, 65 bytes), as swift-crypto's
    /// `P256.Signing.PublicKey(x963Representation:)` and Apple's SecKey export take it.
    public let publicKey: [UInt8]

    init(
        usage: TPMKeyUsage, publicArea: [UInt8], privateArea: [UInt8], storageKeyAlgorithm: StorageKeyAlgorithm,
        storageKeyName: [UInt8]
    ) throws(TPMError) {
        self.usage = usage
        self.publicArea = publicArea
        self.privateArea = privateArea
        self.storageKeyAlgorithm = storageKeyAlgorithm
        self.storageKeyName = storageKeyName
        let fields = try Self.validated(publicArea, usage: usage)
        authPolicy = fields.policy
        isDictionaryAttackProtected = fields.dictionaryAttackProtected
        usableWithAuthValue = fields.userWithAuth
        publicKey = [0x04] + fields.x + fields.y
    }

    /// Decodes ``serialized()`` output.
    ///
    /// - Throws: ``TPMError`` `.malformedData` for a wrong magic, version or usage, oversized or
    ///   truncated fields, trailing bytes, or a public area that is not the key this library makes.
    public init(serialized bytes: [UInt8]) throws(TPMError) {
        var reader = WireReader(bytes)
        let fields:
            (usage: TPMKeyUsage, algorithm: StorageKeyAlgorithm, name: [UInt8], public: [UInt8], private: [UInt8])
        do throws(WireFormatError) {
            guard try reader.readBytes(4) == Self.magic else {
                throw WireFormatError("Not a TPMKeychain TPM key (bad magic)")
            }
            let version = try reader.readUInt16()
            guard version == Self.version || version == Self.keyFileParentVersion else {
                throw WireFormatError(
                    "TPM key version \(version) is not supported (this build reads \(Self.version) and \(Self.keyFileParentVersion))"
                )
            }
            let usageByte = try reader.readUInt8()
            guard let usage = TPMKeyUsage(rawValue: usageByte) else {
                throw WireFormatError("Unknown TPM key usage \(usageByte)")
            }
            if version == Self.keyFileParentVersion {
                let template = try reader.readUInt8()
                guard template == Self.keyFileParentTemplate else {
                    throw WireFormatError("Unknown parent template \(template)")
                }
            }
            let tail = try StoredObjectFields.read(&reader, what: "TPM key")
            var algorithm = tail.storageKeyAlgorithm
            if version == Self.keyFileParentVersion {
                guard algorithm == .eccP256 else {
                    throw WireFormatError("The key-file parent is an ECC key, not \(algorithm.rawValue)")
                }
                algorithm = .eccP256KeyFile
            }
            fields = (usage, algorithm, tail.storageKeyName, tail.publicArea, tail.privateArea)
        } catch {
            throw TPMError(.malformedData, error.message)
        }
        try self.init(
            usage: fields.usage, publicArea: fields.public, privateArea: fields.private,
            storageKeyAlgorithm: fields.algorithm, storageKeyName: fields.name)
    }

    /// The bytes to store; see the type's documentation for the layout.
    public func serialized() -> [UInt8] {
        var writer = WireWriter()
        writer.append(raw: Self.magic)
        let underKeyFileParent = storageKeyAlgorithm == .eccP256KeyFile
        writer.append(underKeyFileParent ? Self.keyFileParentVersion : Self.version)
        writer.append(usage.rawValue)
        if underKeyFileParent { writer.append(Self.keyFileParentTemplate) }
        StoredObjectFields.append(self, to: &writer)
        return writer.bytes
    }

    /// The public area's fields, after checking that it is the P-256 key ``PublicTemplate/eccKey``
    /// makes for `usage`: made in this TPM, bound to it and its parent, unrestricted, signing or
    /// decrypting as the usage says, no scheme or KDF fixed (the command chooses), and userWithAuth
    /// only beside the policy PolicyAuthValue alone.
    private static func validated(
        _ publicArea: [UInt8], usage: TPMKeyUsage
    ) throws(TPMError) -> (
        policy: PolicyDigest, dictionaryAttackProtected: Bool, userWithAuth: Bool, x: [UInt8], y: [UInt8]
    ) {
        let fields: (attributes: ObjectAttributes, policy: [UInt8], x: [UInt8], y: [UInt8])
        do throws(WireFormatError) {
            var reader = WireReader(publicArea)
            guard Int(try reader.readUInt16()) == reader.remaining else {
                throw WireFormatError("The key's public area size does not match its contents")
            }
            guard try reader.readUInt16() == AlgorithmID.ecc, try reader.readUInt16() == AlgorithmID.sha256 else {
                throw WireFormatError("The key is not an ECC key named with SHA-256")
            }
            let attributes = ObjectAttributes(rawValue: try reader.readUInt32())
            let policy = try reader.readSized(maximum: 64)
            guard try reader.readUInt16() == AlgorithmID.null, try reader.readUInt16() == AlgorithmID.null,
                try reader.readUInt16() == AlgorithmID.eccNistP256, try reader.readUInt16() == AlgorithmID.null
            else {
                throw WireFormatError("The key is not an unrestricted NIST P-256 key without a fixed scheme")
            }
            let x = try reader.readSized(maximum: 32)
            let y = try reader.readSized(maximum: 32)
            guard reader.remaining == 0, x.count == 32, y.count == 32 else {
                throw WireFormatError("The key's public point is not a P-256 point")
            }
            fields = (attributes, policy, x, y)
        } catch {
            throw TPMError(.malformedData, error.message)
        }
        let required: ObjectAttributes = [.fixedTPM, .fixedParent, .sensitiveDataOrigin, .adminWithPolicy]
        let roles = usage.roles
        let others = ObjectAttributes([.sign, .decrypt]).subtracting(roles)
        let userWithAuth = fields.attributes.contains(.userWithAuth)
        guard fields.attributes.isSuperset(of: required), fields.attributes.isSuperset(of: roles),
            fields.attributes.isDisjoint(with: others), !fields.attributes.contains(.restricted),
            fields.policy.count == 32,
            !userWithAuth || fields.policy == Policy.authValue.digest.bytes
        else {
            throw TPMError(
                .malformedData,
                "The public area is not a \(usage.signs ? "signing" : "")\(usage == .signingAndKeyAgreement ? " and " : "")\(usage.agreesOnKeys ? "key-agreement" : "") key made in and bound to this TPM under its policy"
            )
        }
        return (
            try PolicyDigest(fields.policy), !fields.attributes.contains(.noDA), userWithAuth, fields.x, fields.y
        )
    }
}

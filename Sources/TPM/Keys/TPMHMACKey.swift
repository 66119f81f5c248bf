import WireFormat

/// An HMAC-SHA256 key made inside the TPM, whose key bytes never leave it: what derives a
/// secret per application (the Secret portal's) that only this TPM can derive again.
///
/// As for ``TPMKey``, the private area is encrypted by the storage key and the key is fixedTPM
/// and fixedParent, so the blob is useless on another TPM. ``serialized()`` (big-endian):
///
///     magic            4 bytes  "TKHM"
///     version          UINT16   1
///     parentAlgorithm  UINT16   TPM_ALG_ID of the storage key: 0x0023 ECC, 0x0001 RSA
///     parentName       UINT16 size + bytes (at most 66): the storage key's name when made
///     public           UINT16 size + bytes: the marshalled TPM2B_PUBLIC
///     private          UINT16 size + bytes: the marshalled TPM2B_PRIVATE
public struct TPMHMACKey: StoredTPMObject, Sendable, Hashable {
    static let magic: [UInt8] = Array("TKHM".utf8)
    static let version: UInt16 = 1

    public let publicArea: [UInt8]
    public let privateArea: [UInt8]
    public let storageKeyAlgorithm: StorageKeyAlgorithm
    public let storageKeyName: [UInt8]
    /// The policy every use requires, read from the public area.
    public let authPolicy: PolicyDigest
    let acceptsAuthValueAlone: Bool

    init(
        publicArea: [UInt8], privateArea: [UInt8], storageKeyAlgorithm: StorageKeyAlgorithm, storageKeyName: [UInt8]
    ) throws(TPMError) {
        self.publicArea = publicArea
        self.privateArea = privateArea
        self.storageKeyAlgorithm = storageKeyAlgorithm
        self.storageKeyName = storageKeyName
        let fields = try Self.validated(publicArea)
        authPolicy = fields.policy
        acceptsAuthValueAlone = fields.userWithAuth
    }

    /// Decodes ``serialized()`` output.
    ///
    /// - Throws: ``TPMError`` `.malformedData` for a wrong magic or version, oversized or truncated
    ///   fields, trailing bytes, or a public area that is not the key this library makes.
    public init(serialized bytes: [UInt8]) throws(TPMError) {
        var reader = WireReader(bytes)
        let tail:
            (
                storageKeyAlgorithm: StorageKeyAlgorithm, storageKeyName: [UInt8], publicArea: [UInt8],
                privateArea: [UInt8]
            )
        do throws(WireFormatError) {
            guard try reader.readBytes(4) == Self.magic else {
                throw WireFormatError("Not a TPMKeychain HMAC key (bad magic)")
            }
            let version = try reader.readUInt16()
            guard version == Self.version else {
                throw WireFormatError("HMAC key version \(version) is not supported (this build reads \(Self.version))")
            }
            let read = try StoredObjectFields.read(&reader, what: "HMAC key")
            tail = (read.storageKeyAlgorithm, read.storageKeyName, read.publicArea, read.privateArea)
        } catch {
            throw TPMError(.malformedData, error.message)
        }
        try self.init(
            publicArea: tail.publicArea, privateArea: tail.privateArea, storageKeyAlgorithm: tail.storageKeyAlgorithm,
            storageKeyName: tail.storageKeyName)
    }

    /// The bytes to store; see the type's documentation for the layout.
    public func serialized() -> [UInt8] {
        var writer = WireWriter()
        writer.append(raw: Self.magic)
        writer.append(Self.version)
        StoredObjectFields.append(self, to: &writer)
        return writer.bytes
    }

    /// The public area's policy and userWithAuth, after checking that it is the key
    /// ``PublicTemplate/hmacKey(policy:)`` makes: keyed-hash, HMAC-SHA256, made in this TPM and
    /// bound to it, signing only, unrestricted.
    private static func validated(_ publicArea: [UInt8]) throws(TPMError) -> (policy: PolicyDigest, userWithAuth: Bool)
    {
        let fields: (attributes: ObjectAttributes, policy: [UInt8])
        do throws(WireFormatError) {
            var reader = WireReader(publicArea)
            guard Int(try reader.readUInt16()) == reader.remaining else {
                throw WireFormatError("The key's public area size does not match its contents")
            }
            guard try reader.readUInt16() == AlgorithmID.keyedHash, try reader.readUInt16() == AlgorithmID.sha256 else {
                throw WireFormatError("The key is not a keyed-hash object named with SHA-256")
            }
            let attributes = ObjectAttributes(rawValue: try reader.readUInt32())
            let policy = try reader.readSized(maximum: 64)
            guard try reader.readUInt16() == AlgorithmID.hmac, try reader.readUInt16() == AlgorithmID.sha256 else {
                throw WireFormatError("The key's scheme is not HMAC-SHA256")
            }
            let unique = try reader.readSized(maximum: 32)
            guard reader.remaining == 0, unique.count == 32 else {
                throw WireFormatError("The key's public area does not end with its 32-byte unique field")
            }
            fields = (attributes, policy)
        } catch {
            throw TPMError(.malformedData, error.message)
        }
        let required: ObjectAttributes = [.fixedTPM, .fixedParent, .sensitiveDataOrigin, .adminWithPolicy, .sign]
        let userWithAuth = fields.attributes.contains(.userWithAuth)
        guard fields.attributes.isSuperset(of: required), !fields.attributes.contains(.decrypt),
            !fields.attributes.contains(.restricted), fields.policy.count == 32,
            !userWithAuth || fields.policy == Policy.authValue.digest.bytes
        else {
            throw TPMError(.malformedData, "The public area is not an HMAC key made in and bound to this TPM")
        }
        return (try PolicyDigest(fields.policy), userWithAuth)
    }
}

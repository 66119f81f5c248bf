import WireFormat

/// A secret sealed by a TPM: safe to store anywhere, usable only on the TPM that sealed it.
///
/// ``serialized()`` produces the "sealed object" format of docs/FORMAT.md (all integers big-endian):
///
///     magic            4 bytes  "TKSO"
///     version          UINT16   1
///     parentAlgorithm  UINT16   TPM_ALG_ID of the storage key: 0x0023 ECC, 0x0001 RSA
///     parentName       UINT16 size + bytes (at most 66): the storage key's name when sealed
///     public           UINT16 size + bytes: the marshalled TPM2B_PUBLIC
///     private          UINT16 size + bytes: the marshalled TPM2B_PRIVATE
///
/// Every size is checked against its limit before anything is allocated, and trailing bytes are
/// an error. The public area must describe a fixedTPM, fixedParent, SHA-256 keyed-hash object
/// with a policy; userWithAuth is accepted only with the policy PolicyAuthValue alone (which asks
/// for no more than userWithAuth does). Anything else is rejected before the TPM is asked.
public struct SealedObject: StoredTPMObject, Sendable, Hashable {
    static let magic: [UInt8] = Array("TKSO".utf8)
    static let version: UInt16 = 1
    static let maximumNameSize = 2 + 64
    static let maximumPublicSize = 2 + 1024
    static let maximumPrivateSize = 2 + 1024

    /// The marshalled TPM2B_PUBLIC.
    public let publicArea: [UInt8]
    /// The marshalled TPM2B_PRIVATE, encrypted by the storage key inside the TPM.
    public let privateArea: [UInt8]
    /// The kind of storage key the object was sealed under.
    public let storageKeyAlgorithm: StorageKeyAlgorithm
    /// The storage key's name at sealing time; a TPM with another storage key is refused.
    public let storageKeyName: [UInt8]
    /// The policy the object requires, read from its public area.
    public let authPolicy: PolicyDigest
    /// Whether the TPM counts failed authorizations of this object toward its dictionary-attack
    /// lockout (the noDA attribute is clear). Objects sealed with a PIN are; objects without one
    /// are not, except those sealed by versions before 0.2, which a store reseals when it opens.
    public let isDictionaryAttackProtected: Bool
    /// Whether the object also accepts its authorization value in an HMAC session (userWithAuth,
    /// only with the policy PolicyAuthValue alone): sealed objects made since 2026-11-27.
    public let unsealsWithAuthValue: Bool
    var acceptsAuthValueAlone: Bool { unsealsWithAuthValue }

    init(
        publicArea: [UInt8], privateArea: [UInt8], storageKeyAlgorithm: StorageKeyAlgorithm,
        storageKeyName: [UInt8]
    ) throws(TPMError) {
        self.publicArea = publicArea
        self.privateArea = privateArea
        self.storageKeyAlgorithm = storageKeyAlgorithm
        self.storageKeyName = storageKeyName
        (authPolicy, isDictionaryAttackProtected, unsealsWithAuthValue) = try Self.validatedPolicy(
            ofPublicArea: publicArea)
    }

    /// Decodes ``serialized()`` output.
    ///
    /// - Throws: ``TPMError`` `.malformedData` for a wrong magic or version, oversized or
    ///   truncated fields, trailing bytes, or a public area that is not a policy-only sealed object.
    public init(serialized bytes: [UInt8]) throws(TPMError) {
        let fields: (name: [UInt8], publicArea: [UInt8], privateArea: [UInt8], algorithm: StorageKeyAlgorithm)
        do {
            fields = try Self.fields(of: bytes)
        } catch {
            throw TPMError(.malformedData, error.message)
        }
        try self.init(
            publicArea: fields.publicArea, privateArea: fields.privateArea, storageKeyAlgorithm: fields.algorithm,
            storageKeyName: fields.name)
    }

    private static func fields(
        of bytes: [UInt8]
    ) throws(WireFormatError)
        -> (name: [UInt8], publicArea: [UInt8], privateArea: [UInt8], algorithm: StorageKeyAlgorithm)
    {
        var reader = WireReader(bytes)
        guard try reader.readBytes(4) == Self.magic else {
            throw WireFormatError("Not a TPMKeychain sealed object (bad magic)")
        }
        let version = try reader.readUInt16()
        guard version == Self.version else {
            throw WireFormatError(
                "Sealed object version \(version) is not supported (this build reads version \(Self.version))")
        }
        let tail = try StoredObjectFields.read(&reader, what: "sealed object")
        return (tail.storageKeyName, tail.publicArea, tail.privateArea, tail.storageKeyAlgorithm)
    }

    /// The bytes to store; see the type's documentation for the layout.
    public func serialized() -> [UInt8] {
        var writer = WireWriter()
        writer.append(raw: Self.magic)
        writer.append(Self.version)
        StoredObjectFields.append(self, to: &writer)
        return writer.bytes
    }

    private static func validatedPolicy(
        ofPublicArea publicArea: [UInt8]
    ) throws(TPMError)
        -> (policy: PolicyDigest, dictionaryAttackProtected: Bool, userWithAuth: Bool)
    {
        let fields: (type: UInt16, nameAlgorithm: UInt16, attributes: ObjectAttributes, policy: [UInt8])
        do throws(WireFormatError) {
            var reader = WireReader(publicArea)
            let size = Int(try reader.readUInt16())
            guard size == reader.remaining else {
                throw WireFormatError("The sealed object's public area is \(reader.remaining) bytes but claims \(size)")
            }
            fields = (
                try reader.readUInt16(), try reader.readUInt16(), ObjectAttributes(rawValue: try reader.readUInt32()),
                try reader.readSized(maximum: 64)
            )
        } catch {
            throw TPMError(.malformedData, error.message)
        }
        guard fields.type == AlgorithmID.keyedHash, fields.nameAlgorithm == AlgorithmID.sha256,
            fields.attributes.isSuperset(of: [.fixedTPM, .fixedParent]), fields.policy.count == 32
        else {
            throw TPMError(.malformedData, "The public area is not a policy-bound sealed object bound to this TPM")
        }
        let userWithAuth = fields.attributes.contains(.userWithAuth)
        guard !userWithAuth || fields.policy == Policy.authValue.digest.bytes else {
            throw TPMError(
                .malformedData,
                "The sealed object also accepts a bare authorization value besides its policy: it could be unsealed without satisfying the policy"
            )
        }
        return (try PolicyDigest(fields.policy), !fields.attributes.contains(.noDA), userWithAuth)
    }
}

/// A blob of an object made under the storage key and stored outside the TPM: sealed data
/// (``SealedObject``) or a key (``TPMKey``).
protocol StoredTPMObject {
    var publicArea: [UInt8] { get }
    var privateArea: [UInt8] { get }
    var storageKeyAlgorithm: StorageKeyAlgorithm { get }
    var storageKeyName: [UInt8] { get }
    var authPolicy: PolicyDigest { get }
    /// userWithAuth (only beside the policy PolicyAuthValue alone).
    var acceptsAuthValueAlone: Bool { get }
}

/// The fields both blob formats end with: parentAlgorithm, parentName, public, private.
enum StoredObjectFields {
    static func append(_ object: some StoredTPMObject, to writer: inout WireWriter) {
        writer.append(object.storageKeyAlgorithm.algorithmID)
        writer.appendSized(object.storageKeyName)
        writer.appendSized(object.publicArea)
        writer.appendSized(object.privateArea)
    }

    /// Reads them, and checks that nothing follows.
    static func read(
        _ reader: inout WireReader, what: String
    ) throws(WireFormatError) -> (
        storageKeyAlgorithm: StorageKeyAlgorithm, storageKeyName: [UInt8], publicArea: [UInt8], privateArea: [UInt8]
    ) {
        let algorithm: StorageKeyAlgorithm
        switch try reader.readUInt16() {
        case AlgorithmID.ecc: algorithm = .eccP256
        case AlgorithmID.rsa: algorithm = .rsa2048
        case let other: throw WireFormatError("Unknown storage key algorithm 0x\(String(other, radix: 16))")
        }
        let name = try reader.readSized(maximum: SealedObject.maximumNameSize)
        let publicArea = try reader.readSized(maximum: SealedObject.maximumPublicSize)
        let privateArea = try reader.readSized(maximum: SealedObject.maximumPrivateSize)
        guard reader.remaining == 0 else { throw WireFormatError("The \(what) has \(reader.remaining) trailing bytes") }
        return (algorithm, name, publicArea, privateArea)
    }
}

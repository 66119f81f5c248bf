import SwiftASN1

// The TPM 2.0 Key File format ("TSS2 PRIVATE KEY", draft-bottomley-tpm2-keys §3.1), which the
// tpm2 OpenSSL provider, tpm2-tss-engine and ssh-tpm-agent load:
//
//     TPMKey ::= SEQUENCE {
//         type       OBJECT IDENTIFIER,              -- id-loadablekey 2.23.133.10.1.3
//         emptyAuth  [0] EXPLICIT BOOLEAN OPTIONAL,  -- TRUE: the tools ask for no password
//         parent     INTEGER,                        -- 0x40000001: the owner hierarchy's primary
//         pubkey     OCTET STRING,                   -- TPM2B_PUBLIC
//         privkey    OCTET STRING }                  -- TPM2B_PRIVATE
//
// Parent 0x40000001 means the primary key every reader derives from the owner seed with the ECC
// P-256 template whose `unique` fields are empty (TCG EK Credential Profile, template H-2): the
// key-file parent (``StorageKeyAlgorithm/eccP256KeyFile``), not this library's storage key.
extension TPMKey {
    static let loadableKeyOID: ASN1ObjectIdentifier = [2, 23, 133, 10, 1, 3]
    static let ownerHierarchy = 0x4000_0001
    static let keyFileLabel = "TSS2 PRIVATE KEY"

    /// Whether ``tss2KeyFile(emptyAuth:)`` can write the key: made under the key-file parent
    /// (``KeyParent/keyFilePrimary``), with no policy beyond its authorization value.
    public var isWritableAsKeyFile: Bool { storageKeyAlgorithm == .eccP256KeyFile && usableWithAuthValue }

    /// The key as a TSS2 PRIVATE KEY PEM file, usable by other TPM tools on this TPM alone.
    ///
    /// - Parameter emptyAuth: the key's authorization value is empty, so the tools ask for none;
    ///   false makes them ask for a password.
    /// - Throws: ``TPMError`` `.invalidArgument` for a key not ``isWritableAsKeyFile``: one under
    ///   the storage key would be looked for under another parent, and one whose policy asks more
    ///   than its authorization value could not be used.
    public func tss2KeyFile(emptyAuth: Bool) throws(TPMError) -> String {
        guard storageKeyAlgorithm == .eccP256KeyFile else {
            throw TPMError(
                .invalidArgument,
                "Only a key made for key files (under the key-file parent) is written as a TSS2 key file; other tools would look for this one under another parent"
            )
        }
        guard usableWithAuthValue else {
            throw TPMError(
                .invalidArgument,
                "The key's policy asks more than its authorization value; other tools could not use it")
        }
        var serializer = DER.Serializer()
        do {
            try serializer.appendConstructedNode(identifier: .sequence) { coder in
                try coder.serialize(Self.loadableKeyOID)
                try coder.serialize(explicitlyTaggedWithTagNumber: 0, tagClass: .contextSpecific) { coder in
                    try coder.serialize(emptyAuth)
                }
                try coder.serialize(Self.ownerHierarchy)
                try coder.serialize(ASN1OctetString(contentBytes: publicArea[...]))
                try coder.serialize(ASN1OctetString(contentBytes: privateArea[...]))
            }
        } catch {
            throw TPMError(.invalidArgument, "The key could not be encoded as a TSS2 key file: \(error)")
        }
        return PEMDocument(type: Self.keyFileLabel, derBytes: serializer.serializedBytes).pemString + "\n"
    }

    /// A key read from a TSS2 PRIVATE KEY PEM file: one ``tss2KeyFile(emptyAuth:)`` wrote, or
    /// another tool's of the same shape (a P-256 key this library could have made).
    ///
    /// - Parameters:
    ///   - parentName: the key-file parent's name on this TPM (``TPMConnection/keyFileParentName()``).
    /// - Returns: the key and its file's emptyAuth.
    /// - Throws: ``TPMError`` `.malformedData` for anything else: another PEM type or OID, a
    ///   policy or secret field (not supported), a parent other than 0x40000001, trailing data, a
    ///   public area this library does not make.
    public static func parsingTSS2KeyFile(
        _ pem: String, parentName: [UInt8]
    ) throws(TPMError) -> (key: TPMKey, emptyAuth: Bool) {
        let fields: (emptyAuth: Bool, public: [UInt8], private: [UInt8])
        do {
            let document = try PEMDocument(pemString: pem)
            guard document.discriminator == keyFileLabel else {
                throw TPMError(.malformedData, "Not a \(keyFileLabel) but a \(document.discriminator)")
            }
            let root = try DER.parse(document.derBytes)
            fields = try DER.sequence(root, identifier: .sequence) { nodes in
                guard try ASN1ObjectIdentifier(derEncoded: &nodes) == loadableKeyOID else {
                    throw TPMError(.malformedData, "Not a loadable TPM key (OID 2.23.133.10.1.3)")
                }
                let emptyAuth =
                    try DER.optionalExplicitlyTagged(&nodes, tagNumber: 0, tagClass: .contextSpecific) {
                        try Bool(derEncoded: $0)
                    } ?? false
                guard try Int(derEncoded: &nodes) == ownerHierarchy else {
                    throw TPMError(
                        .malformedData,
                        "The key's parent is not the owner hierarchy's primary key (0x40000001), or the file has policy or secret fields, which are not supported"
                    )
                }
                let publicArea = try ASN1OctetString(derEncoded: &nodes)
                let privateArea = try ASN1OctetString(derEncoded: &nodes)
                guard nodes.next() == nil else {
                    throw TPMError(.malformedData, "The key file has fields after the private area")
                }
                return (emptyAuth, Array(publicArea.bytes), Array(privateArea.bytes))
            }
        } catch let error as TPMError {
            throw error
        } catch {
            throw TPMError(.malformedData, "Not a TSS2 key file: \(error)")
        }
        guard fields.public.count <= SealedObject.maximumPublicSize,
            fields.private.count <= SealedObject.maximumPrivateSize
        else {
            throw TPMError(.malformedData, "The key file's areas are larger than a TPM makes")
        }
        let usage = try usage(ofPublicArea: fields.public)
        let key = try TPMKey(
            usage: usage, publicArea: fields.public, privateArea: fields.private, storageKeyAlgorithm: .eccP256KeyFile,
            storageKeyName: parentName)
        return (key, fields.emptyAuth)
    }

    /// The usage the public area's sign and decrypt attributes give (checked in full by the init).
    private static func usage(ofPublicArea publicArea: [UInt8]) throws(TPMError) -> TPMKeyUsage {
        // TPM2B_PUBLIC: size (2), type (2), nameAlg (2), objectAttributes (4).
        guard publicArea.count >= 10 else { throw TPMError(.malformedData, "The key's public area is truncated") }
        let attributes = ObjectAttributes(
            rawValue: publicArea[6..<10].reduce(UInt32(0)) { $0 << 8 | UInt32($1) })
        switch (attributes.contains(.sign), attributes.contains(.decrypt)) {
        case (true, true): return .signingAndKeyAgreement
        case (true, false): return .signing
        case (false, true): return .keyAgreement
        case (false, false): throw TPMError(.malformedData, "The key neither signs nor decrypts")
        }
    }
}

extension TPMConnection {
    /// The name of the key-file parent on this TPM (derived, as other tools derive it), for
    /// ``TPMKey/parsingTSS2KeyFile(_:parentName:)``.
    ///
    /// - Throws: ``TPMError``.
    public func keyFileParentName() throws -> [UInt8] {
        try withEngine { try $0.storageKey(algorithm: .eccP256KeyFile, pinnedName: nil).name }
    }
}

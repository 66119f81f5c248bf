import Crypto
import FoundationEssentials
import KeychainVocabulary
import SystemCalls
import TPM
import WireFormat

/// The item file, format version 2 (docs/FORMAT.md, "Item file, format 2"), which every store
/// writes; a format-1 store moves to it on its first write. All integers big-endian.
///
///     offset size  field
///     0      4     magic "TKIT"
///     4      2     version = 2
///     6      2     header size H = 124 (readers refuse any other size for version 2)
///     8      16    store ID
///     24     16    item ID (random at creation, kept across updates: the persistent reference)
///     40     8     generation (1 at creation, +1 per update)
///     48     4     class: "genp", "inet" ("keys", "cert" reserved)
///     52     16    key record ID: the record whose key the item key derives from; all zero for
///                  the store's master key
///     68     1     accessibility (``Accessibility``)
///     69     1     value kind (``ValueKind``)
///     70     2     reserved = 0
///     72     32    key salt: item key = HKDF(record's item-key parent, salt, "TPMKeychain v2 item" || store ID || record ID)
///     104    12    nonce N
///     116    4     attributes plaintext length A
///     120    4     secret plaintext length S
///     124    A+16  AES-256-GCM(item key, N, attributes (``AttributeList``), AAD = header) || tag
///     ...    S+16  AES-256-GCM(item key, N xor 1 in the last byte, secret,
///                  AAD = header || class primary key (``ItemClass/encodedPrimaryKey(of:)``) || attributes section) || tag
///
/// Differences from version 1: the class and the key record are in the header (access control
/// reads them before decrypting anything); attributes are tagged, so new ones never change the
/// format; the identity in the secret's AAD is the class's whole primary key.
enum ItemFileV2 {
    static let version: UInt16 = 2
    static let headerSize = 124
    static let tagSize = 16
    /// The key record ID of items protected by the store's master key.
    static let masterKeyRecord = ItemQueryResult.masterKeyRecord

    /// What a format-2 item holds, decrypted.
    struct Contents: Sendable, Equatable {
        var itemID: [UInt8]
        var generation: UInt64
        var itemClass: ItemClass
        var keyRecord: [UInt8]
        var accessibility: Accessibility
        var kind: ValueKind
        var attributes: AttributeList
        var value: [UInt8]
    }

    /// A parsed header: the bytes as read (the AAD of both sections), the fields as views of them.
    struct Header {
        let bytes: [UInt8]
        let generation: UInt64
        let itemClass: ItemClass
        let accessibility: Accessibility
        let kind: ValueKind
        let attributesLength: Int
        let secretLength: Int

        var storeID: [UInt8] { Array(bytes[8..<24]) }
        var itemID: [UInt8] { Array(bytes[24..<40]) }
        var keyRecord: [UInt8] { Array(bytes[52..<68]) }
        /// The item-key cache's key: a view, so a cache hit allocates nothing.
        var salt: ArraySlice<UInt8> { bytes[72..<104] }
        var nonce: ArraySlice<UInt8> { bytes[104..<116] }

        var attributesRange: Range<Int> {
            ItemFileV2.headerSize..<ItemFileV2.headerSize + attributesLength + ItemFileV2.tagSize
        }
        var secretRange: Range<Int> {
            attributesRange.upperBound..<attributesRange.upperBound + secretLength + ItemFileV2.tagSize
        }
        var fileSize: Int { secretRange.upperBound }
    }

    /// The directory of an item's group: the class, access group, and service (generic
    /// passwords) or server (internet passwords), each as UINT32 length and bytes.
    static func groupName(of itemClass: ItemClass, _ attributes: AttributeList, keys: StoreKeys) -> String {
        let groupTag = itemClass == .internetPassword ? AttributeTag.server : AttributeTag.service
        var writer = WireWriter()
        writer.append(itemClass.rawValue)
        for tag in [AttributeTag.accessGroup, groupTag] {
            let value = attributes[tag] ?? []
            writer.append(UInt32(value.count))
            writer.append(raw: value)
        }
        return keys.name("group2", encoded: writer.bytes)
    }

    /// The item's file name: its class's primary key, keyed.
    static func fileName(of itemClass: ItemClass, _ attributes: AttributeList, keys: StoreKeys) -> String {
        keys.name("item2", encoded: itemClass.encodedPrimaryKey(of: attributes)) + ".item"
    }

    /// The AES-256-GCM key of one write, from the item-key parent of the item's key record.
    static func itemKey(
        parent: SymmetricKey, salt: ArraySlice<UInt8>, storeID: [UInt8], keyRecord: [UInt8]
    ) -> SymmetricKey {
        OneBlockHKDF.deriveKey(
            inputKeyMaterial: parent, salt: salt, info: itemKeyLabel[...], storeID[...], keyRecord[...])
    }

    private static let itemKeyLabel = Array("TPMKeychain v2 item".utf8)

    /// Encrypts `contents` into file bytes. `salt` (32 bytes) and `nonce` (12) must be fresh
    /// random bytes for every write; tests pass fixed ones to check known answers.
    /// `secretKey`, given the attributes key, gives a protected item's secret key (see
    /// ``KeyRecord/protectedSecretKey(attributesKey:shared:recordPublicKey:storeID:recordID:)``);
    /// without it both sections use the attributes key.
    /// `derivedKey`, when given, is ``itemKey(parent:salt:storeID:keyRecord:)`` of this write,
    /// derived already by the caller (which keeps it for the reads that follow).
    static func encode(
        _ contents: Contents, itemKeyParent: SymmetricKey, storeID: [UInt8], salt: [UInt8],
        nonce: [UInt8], secretKey: ((SymmetricKey) -> SymmetricKey)? = nil, derivedKey: SymmetricKey? = nil
    ) throws -> [UInt8] {
        let attributes = contents.attributes.encoded()
        var header = WireWriter()
        header.reserveCapacity(headerSize)
        header.append(raw: ItemFileV1.magic)
        header.append(version)
        header.append(UInt16(headerSize))
        header.append(raw: storeID)
        header.append(raw: contents.itemID)
        header.append(contents.generation)
        header.append(contents.itemClass.rawValue)
        header.append(raw: contents.keyRecord)
        header.append(contents.accessibility.rawValue)
        header.append(contents.kind.rawValue)
        header.append(UInt16(0))
        header.append(raw: salt)
        header.append(raw: nonce)
        header.append(UInt32(attributes.count))
        header.append(UInt32(contents.value.count))
        precondition(header.bytes.count == headerSize, "the v2 header layout is fixed")

        let key =
            derivedKey
            ?? itemKey(parent: itemKeyParent, salt: salt[...], storeID: storeID, keyRecord: contents.keyRecord)
        let attributesSection = try sealedSection(attributes, key: key, nonce: nonce, authenticating: header.bytes)
        let aad = header.bytes + contents.itemClass.encodedPrimaryKey(of: contents.attributes) + attributesSection
        let secretSection = try sealedSection(
            contents.value, key: secretKey?(key) ?? key, nonce: ItemFileV1.secretNonce(nonce), authenticating: aad)
        var file = header.bytes
        file.reserveCapacity(file.count + attributesSection.count + secretSection.count)
        file += attributesSection
        file += secretSection
        return file
    }

    /// Ciphertext ‖ tag of one AES-GCM seal, copied once out of the box's combined form (nonce ‖
    /// ciphertext ‖ tag): the ciphertext and tag properties are two more copies and a concatenation.
    private static func sealedSection(
        _ plaintext: [UInt8], key: SymmetricKey, nonce: [UInt8], authenticating aad: [UInt8]
    ) throws -> [UInt8] {
        let box = try AES.GCM.seal(plaintext, using: key, nonce: AES.GCM.Nonce(data: nonce), authenticating: aad)
        // Nil only for a nonce of another size than 12 bytes, which the format never uses.
        guard let combined = box.combined else { throw CryptoKitError.incorrectParameterSize }
        return combined.withUnsafeBytes { Array($0[nonce.count...]) }
    }

    /// Parses and bounds-checks a version-2 header; nothing in it is trusted until a section decrypts.
    ///
    /// - Throws: ``KeychainError`` `.tampered` (magic, version, sizes, store, class, reserved bytes).
    static func decodeHeader(
        _ bytes: ArraySlice<UInt8>, fileSize: Int, storeID: [UInt8], path: String
    ) throws(KeychainError) -> Header {
        guard bytes.count >= headerSize else { throw KeychainError(.tampered, "\(path) is truncated") }
        // One copy (the AAD); every field is read in place: this runs on every get.
        let header = Array(bytes.prefix(headerSize))
        func integer(_ range: Range<Int>) -> UInt64 { BigEndian.integer(header[range]) }
        guard header[0..<4].elementsEqual(ItemFileV1.magic) else {
            throw KeychainError(.tampered, "\(path) is not a keychain item (bad magic)")
        }
        guard integer(4..<6) == UInt64(version), integer(6..<8) == UInt64(headerSize) else {
            throw KeychainError(.tampered, "\(path) does not have a version-2 header")
        }
        let attributesLength = Int(integer(116..<120))
        let secretLength = Int(integer(120..<124))
        guard let itemClass = ItemClass(rawValue: UInt32(integer(48..<52))),
            let accessibility = Accessibility(rawValue: header[68]),
            let kind = ValueKind(rawValue: header[69]), integer(70..<72) == 0,
            attributesLength <= maximumAttributesSize, secretLength <= ItemValue.maximumSize
        else {
            throw KeychainError(.tampered, "\(path) has a damaged header")
        }
        guard header[8..<24].elementsEqual(storeID) else {
            throw KeychainError(.tampered, "\(path) belongs to another keychain store; it was copied or moved here")
        }
        let parsed = Header(
            bytes: header, generation: integer(40..<48), itemClass: itemClass, accessibility: accessibility, kind: kind,
            attributesLength: attributesLength, secretLength: secretLength)
        guard parsed.fileSize == fileSize else {
            throw KeychainError(
                .tampered,
                "\(path) is \(fileSize) bytes but its header describes \(parsed.fileSize): truncated or padded")
        }
        return parsed
    }

    /// Decrypts a whole version-2 file. With `expectedPrimaryKey` (a lookup), the file must hold
    /// exactly that item; without it (a listing) the caller checks the name against the result.
    ///
    /// - Throws: ``KeychainError`` `.tampered` when authentication fails or the file holds another item.
    static func decode(
        _ file: [UInt8], itemKeyParent: SymmetricKey, storeID: [UInt8], expectedPrimaryKey: [UInt8]?,
        path: String
    ) throws(KeychainError) -> Contents {
        let header = try decodeHeader(file[...], fileSize: file.count, storeID: storeID, path: path)
        let key = itemKey(parent: itemKeyParent, salt: header.salt, storeID: storeID, keyRecord: header.keyRecord)
        let attributes = try decryptAttributes(file[header.attributesRange], header: header, key: key, path: path)
        let primaryKey = header.itemClass.encodedPrimaryKey(of: attributes)
        if let expectedPrimaryKey, expectedPrimaryKey != primaryKey {
            throw KeychainError(.tampered, "\(path) holds another item: it was swapped or renamed")
        }
        let value = try decryptSecret(of: file, header: header, key: key, primaryKey: primaryKey, path: path)
        return Contents(
            itemID: header.itemID, generation: header.generation, itemClass: header.itemClass,
            keyRecord: header.keyRecord,
            accessibility: header.accessibility, kind: header.kind, attributes: attributes, value: value)
    }

    /// The attributes section alone (listings, `contains`): the secret is not decrypted.
    ///
    /// - Throws: ``KeychainError`` `.tampered`.
    static func decryptAttributes(
        _ sealed: ArraySlice<UInt8>, header: Header, key: SymmetricKey,
        path: String
    ) throws(KeychainError) -> AttributeList {
        try AttributeList(
            decoding: open(sealed, key: key, nonce: header.nonce, secretSection: false, aad: header.bytes, path: path),
            path: path)
    }

    /// The secret section alone, for the item whose class primary key is `primaryKey`: the
    /// attributes section is authenticated with it, not decrypted.
    ///
    /// - Throws: ``KeychainError`` `.tampered`, also for a file of another item.
    static func decryptSecret(
        of file: [UInt8], header: Header, key: SymmetricKey, primaryKey: [UInt8],
        path: String
    ) throws(KeychainError) -> [UInt8] {
        var aad = header.bytes
        aad.reserveCapacity(header.bytes.count + primaryKey.count + header.attributesRange.count)
        aad.append(contentsOf: primaryKey)
        aad.append(contentsOf: file[header.attributesRange])
        return try open(
            file[header.secretRange], key: key, nonce: header.nonce, secretSection: true, aad: aad, path: path)
    }

    /// Room for every known attribute at its limit and for tags a later version adds.
    static let maximumAttributesSize = 256 << 10
    static let maximumFileSize = headerSize + maximumAttributesSize + tagSize + ItemValue.maximumSize + tagSize

    private static func open(
        _ sealed: ArraySlice<UInt8>, key: SymmetricKey, nonce: ArraySlice<UInt8>, secretSection: Bool,
        aad: [UInt8], path: String
    ) throws(KeychainError) -> [UInt8] {
        try ItemFileV1.open(
            sealed, key: key, nonce: nonce, secretSection: secretSection, authenticating: aad, path: path)
    }
}

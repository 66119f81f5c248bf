import Crypto
import FoundationEssentials
import KeychainVocabulary
import TPM
import WireFormat

/// The item file, format version 1 (docs/FORMAT.md, "Item file"). All integers big-endian.
///
///     offset size  field
///     0      4     magic "TKIT"
///     4      2     version = 1
///     6      2     header size = 104
///     8      16    store ID (the store's UUID)
///     24     16    item ID (random at creation, kept across updates)
///     40     8     generation (1 at creation, +1 per update)
///     48     1     accessibility (``Accessibility``)
///     49     1     policy = 0 (master key only; reserved for access control)
///     50     1     value kind (``ValueKind``)
///     51     1     reserved = 0
///     52     32    key salt: this write's item key is HKDF(items key, salt, info || store ID)
///     84     12    nonce N
///     96     4     attributes ciphertext length A
///     100    4     secret ciphertext length S
///     104    A+16  AES-256-GCM(item key, N, attributes) || tag
///     ...    S+16  AES-256-GCM(item key, N xor 1 in the last byte, secret) || tag
///
/// The whole header is the additional authenticated data of both sections, so every plaintext
/// byte is authenticated. The attributes carry the access group, service and account, which a
/// reader checks against the item it looked up. The secret section's AAD is the header, then the
/// identity (UINT32-length-prefixed access group, service, account), then the whole attributes
/// section: a value read decrypts the secret alone, yet any changed byte anywhere in the file,
/// or a file that belongs to another item, still fails. The file is exactly 104 + A + 16 + S + 16 bytes.
enum ItemFileV1 {
    static let magic = Array("TKIT".utf8)
    static let version: UInt16 = 1
    static let headerSize = 104
    static let tagSize = 16
    static let nonceSize = 12
    static let maximumLabelBytes = 4096
    static let maximumGenericDataBytes = 64 << 10
    static let maximumAttributesSize =
        3 * (2 + ItemIdentity.maximumNameBytes) + 2 * (3 + maximumLabelBytes)
        + 5 + maximumGenericDataBytes + 16
    static let maximumFileSize = headerSize + maximumAttributesSize + tagSize + ItemValue.maximumSize + tagSize

    struct Header {
        let bytes: [UInt8]
        let storeID: [UInt8]
        let itemID: [UInt8]
        let generation: UInt64
        let accessibility: Accessibility
        let kind: ValueKind
        let salt: [UInt8]
        let nonce: [UInt8]
        let attributesLength: Int
        let secretLength: Int

        var attributesRange: Range<Int> {
            ItemFileV1.headerSize..<ItemFileV1.headerSize + attributesLength + ItemFileV1.tagSize
        }
        var secretRange: Range<Int> {
            attributesRange.upperBound..<attributesRange.upperBound + secretLength + ItemFileV1.tagSize
        }
        var fileSize: Int { secretRange.upperBound }
    }

    // MARK: Writing

    /// Encrypts `record` into file bytes. `salt` (32 bytes) and `nonce` (12) must be fresh random
    /// bytes for every write; tests pass fixed ones to check known answers.
    static func encode(
        _ record: ItemRecord, keys: StoreKeys, storeID: [UInt8], salt: [UInt8], nonce: [UInt8]
    ) throws -> [UInt8] {
        let attributes = encodeAttributes(record.attributes)
        var header = WireWriter()
        header.append(raw: magic)
        header.append(version)
        header.append(UInt16(headerSize))
        header.append(raw: storeID)
        header.append(raw: record.itemID)
        header.append(record.generation)
        header.append(record.attributes.accessibility.rawValue)
        header.append(UInt8(0))
        header.append(record.value.kind.rawValue)
        header.append(UInt8(0))
        header.append(raw: salt)
        header.append(raw: nonce)
        header.append(UInt32(attributes.count))
        header.append(UInt32(record.value.bytes.count))
        precondition(header.bytes.count == headerSize, "the v1 header layout is fixed")

        let key = keys.itemKey(salt: salt, storeID: storeID)
        let sealedAttributes = try AES.GCM.seal(
            attributes, using: key, nonce: AES.GCM.Nonce(data: nonce),
            authenticating: header.bytes)
        let identity = try ItemIdentity(
            accessGroup: record.attributes.accessGroupName, service: record.attributes.service,
            account: record.attributes.account)
        let attributesSection = Array(sealedAttributes.ciphertext) + Array(sealedAttributes.tag)
        let sealedSecret = try AES.GCM.seal(
            record.value.bytes, using: key, nonce: AES.GCM.Nonce(data: secretNonce(nonce)),
            authenticating: secretAAD(header.bytes, identity, attributesSection[...]))
        var file = header.bytes
        file.reserveCapacity(headerSize + attributes.count + record.value.bytes.count + 2 * tagSize)
        file.append(contentsOf: attributesSection)
        file.append(contentsOf: sealedSecret.ciphertext)
        file.append(contentsOf: sealedSecret.tag)
        return file
    }

    // MARK: Reading

    /// Parses and bounds-checks a header; nothing in it is trusted until a section decrypts.
    ///
    /// - Throws: ``KeychainError`` `.tampered` (wrong magic, sizes, store) or `.unsupportedVersion`.
    static func decodeHeader(
        _ bytes: ArraySlice<UInt8>, fileSize: Int, storeID: [UInt8], path: String
    ) throws(KeychainError) -> Header {
        return try KeychainError.parsing(
            { () throws in
                guard bytes.prefix(4).elementsEqual(magic) else {
                    throw KeychainError(.tampered, "\(path) is not a keychain item (bad magic)")
                }
                var reader = WireReader(Array(bytes.dropFirst(4)))
                // The store's format version is authenticated in store.meta, and a store whose version
                // this build does not know is refused when it is opened. An item of another version in
                // a version-1 store was therefore not written by any TPMKeychain: it was modified.
                let version = try reader.readUInt16()
                guard version == Self.version else {
                    throw KeychainError(
                        .tampered,
                        "\(path) claims item format version \(version) inside a version-\(Self.version) store: it was modified"
                    )
                }
                guard try reader.readUInt16() == headerSize else {
                    throw KeychainError(.tampered, "\(path) has a damaged header")
                }
                let fileStoreID = try reader.readBytes(16)
                let itemID = try reader.readBytes(16)
                let generation = try reader.readUInt64()
                let accessibility = Accessibility(rawValue: try reader.readUInt8())
                let policy = try reader.readUInt8()
                let kind = ValueKind(rawValue: try reader.readUInt8())
                let reserved = try reader.readUInt8()
                let salt = try reader.readBytes(32)
                let nonce = try reader.readBytes(12)
                let attributesLength = Int(try reader.readUInt32())
                let secretLength = Int(try reader.readUInt32())
                guard let accessibility, let kind, policy == 0, reserved == 0,
                    attributesLength <= maximumAttributesSize, secretLength <= ItemValue.maximumSize
                else {
                    throw KeychainError(.tampered, "\(path) has a damaged header")
                }
                guard fileStoreID == storeID else {
                    throw KeychainError(
                        .tampered, "\(path) belongs to another keychain store; it was copied or moved here")
                }
                let header = Header(
                    bytes: Array(bytes), storeID: fileStoreID, itemID: itemID, generation: generation,
                    accessibility: accessibility, kind: kind, salt: salt, nonce: nonce,
                    attributesLength: attributesLength, secretLength: secretLength)
                guard header.fileSize == fileSize else {
                    throw KeychainError(
                        .tampered,
                        "\(path) is \(fileSize) bytes but its header describes \(header.fileSize): truncated or padded")
                }
                return header
            }, damaged: { (error) in KeychainError(.tampered, "\(path) is truncated", underlying: error) })
    }

    /// Decrypts the attributes and checks that they name the item the file was found for.
    /// `key` is the write's item key (``StoreKeys/itemKey(salt:storeID:)`` of the header's salt).
    ///
    /// - Throws: ``KeychainError`` `.tampered` when authentication fails or the file belongs to another item.
    static func decryptAttributes(
        _ sealed: ArraySlice<UInt8>, header: Header, key: SymmetricKey, expected: ItemIdentity?,
        path: String
    ) throws(KeychainError) -> ItemAttributes {
        let plaintext = try open(
            sealed, key: key, nonce: header.nonce[...], secretSection: false, authenticating: header.bytes, path: path)
        let attributes = try decodeAttributes(plaintext, header: header, path: path)
        if let expected {
            guard attributes.service == expected.service, attributes.account == expected.account,
                attributes.accessGroupName == expected.accessGroup
            else {
                throw KeychainError(.tampered, "\(path) holds another item: it was swapped or renamed")
            }
        }
        return attributes
    }

    /// Decrypts the secret section.
    /// Decrypts the secret section of the item `identity` names.
    ///
    /// - Throws: ``KeychainError`` `.tampered` when the file was modified or belongs to another item.
    /// `file` is the whole item file; its attributes section is authenticated along with the secret.
    static func decryptSecret(
        of file: [UInt8], header: Header, key: SymmetricKey, identity: ItemIdentity,
        path: String
    ) throws(KeychainError) -> ItemValue {
        try decryptSecret(of: file, header: header, key: key, encodedIdentity: encode(identity), path: path)
    }

    /// As above, with the identity already encoded by ``encode(_:)`` (the store caches it).
    static func decryptSecret(
        of file: [UInt8], header: Header, key: SymmetricKey, encodedIdentity: [UInt8],
        path: String
    ) throws(KeychainError) -> ItemValue {
        var aad = header.bytes
        aad.reserveCapacity(header.bytes.count + encodedIdentity.count + header.attributesRange.count)
        aad.append(contentsOf: encodedIdentity)
        aad.append(contentsOf: file[header.attributesRange])
        return ItemValue(
            kind: header.kind,
            bytes: try open(
                file[header.secretRange], key: key, nonce: header.nonce[...], secretSection: true,
                authenticating: aad, path: path))
    }

    /// The secret section's additional data: the header, the identity it belongs to, and the
    /// attributes section as stored (ciphertext and tag).
    static func secretAAD(
        _ header: [UInt8], _ identity: ItemIdentity, _ attributesSection: ArraySlice<UInt8>
    ) -> [UInt8] {
        header + encode(identity) + attributesSection
    }

    /// Access group, service and account, each as UINT32 length and UTF-8.
    static func encode(_ identity: ItemIdentity) -> [UInt8] {
        var writer = WireWriter()
        for field in [identity.accessGroup, identity.service, identity.account] {
            let bytes = Array(field.utf8)
            writer.append(UInt32(bytes.count))
            writer.append(raw: bytes)
        }
        return writer.bytes
    }

    /// One AES-256-GCM open of a section (ciphertext ‖ tag), for both formats; `nonce` is the
    /// header's, whose last bit is flipped for the secret section (`secretSection`).
    static func open(
        _ sealed: ArraySlice<UInt8>, key: SymmetricKey, nonce: ArraySlice<UInt8>, secretSection: Bool,
        authenticating aad: [UInt8], path: String
    ) throws(KeychainError) -> [UInt8] {
        do {
            // One array in swift-crypto's combined layout (nonce, ciphertext, tag): the sealed
            // section is already ciphertext then tag. An array is copied into the box's Data in
            // one step; a Data grown by appends, or SealedBox(nonce:ciphertext:tag:), costs
            // 0.15 to 0.4 µs more per open (measured), on every get.
            guard sealed.count >= tagSize, nonce.count == nonceSize else {
                throw CryptoKitError.incorrectParameterSize
            }
            var combined: [UInt8] = []
            combined.reserveCapacity(nonceSize + sealed.count)
            combined.append(contentsOf: nonce)
            if secretSection { combined[nonceSize - 1] ^= 1 }
            combined.append(contentsOf: sealed)
            let box = try AES.GCM.SealedBox(combined: combined)
            return Array(try AES.GCM.open(box, using: key, authenticating: aad))
        } catch {
            throw KeychainError(
                .tampered, "\(path) failed authentication: it was modified, damaged, or belongs to another item")
        }
    }

    /// The second section's nonce differs from the first in its last bit.
    static func secretNonce(_ nonce: [UInt8]) -> [UInt8] {
        var second = nonce
        second[second.count - 1] ^= 1
        return second
    }
}

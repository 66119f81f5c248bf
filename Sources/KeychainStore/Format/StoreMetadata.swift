import Crypto
import FoundationEssentials
import KeychainVocabulary
import TPM
import WireFormat

/// `store.meta`, format versions 1 to 6 (docs/FORMAT.md, "store.meta"). All integers big-endian.
///
/// The item layout (``version``) says how the items are stored: 1 in `items/` (item format 1), 2 in
/// `items2/` (item format 2), 3 in `items2-<tag>/` (item format 2, after a key rotation). Versions
/// 1 to 5 on disk are that layout (4 and 5: layouts 2 and 3 with a rollback counter):
///
///     offset size  field
///     0      4     magic "TKSM"
///     4      2     version = 1 to 5
///     6      2     reserved = 0
///     8      16    store ID (random UUID)
///     24     8     creation time, milliseconds since 1970
///     32     4     sealed master key length L (at most 4096)
///     36     L     the master key as a TPM sealed object (SealedObject, "TKSO"), which pins the
///                  storage key's name: another TPM is recognised before anything is decrypted
///     36+L   4     versions 4 and 5 only: the NV index of the store's rollback counter (its
///                  manifest's epochs are that counter's values; docs/FORMAT.md, "Manifest")
///     36+L(+4) 32  HMAC-SHA256(metadata key, every byte before it as read from disk)
///
/// Version 6 also records what the store was created for (``Facts``), so that neither its
/// directory's mode nor a `swtpm/` directory found in it can change that afterwards:
///
///     0      4     magic "TKSM"
///     4      2     version = 6
///     6      2     reserved = 0
///     8      16    store ID
///     24     8     creation time, milliseconds since 1970
///     32     2     item layout: 2 or 3
///     34     1     the TPM the master key is sealed to: 1 a TPM device, 2 a simulator, 3 the
///                  simulator whose state is the store's own `swtpm/`
///     35     1     sharing: 0 this user alone, 1 the members of one group
///     36     4     that group's ID (0 for a private store)
///     40     4     the NV index of the rollback counter; 0 for none
///     44     4     sealed master key length L (at most 4096)
///     48     L     the sealed master key
///     48+L   32    HMAC-SHA256(metadata key, every byte before it as read from disk)
///
/// Version 7 is version 6 for a store bound to its user (docs/SECURITY.md, "User binding"): sharing
/// is 2, "this user alone, bound", the next field is that user's ID, and the sealed master key's
/// authorization value is the user's binding secret from `tpm-keychain-enrollment` (noDA, so a
/// wrong one costs no dictionary-attack try). A build that knows only version 6 refuses it
/// rather than failing to unseal.
///
/// The metadata key is derived from the master key, so everything is authenticated once the TPM
/// has unsealed the key. The MAC is checked over the bytes exactly as they are on disk, never over
/// a re-encoding: a field a parser ignores or normalises (the reserved bytes) cannot change unnoticed.
struct StoreMetadata {
    static let magic = Array("TKSM".utf8)
    /// The layout new stores are created with, and what a first write upgrades a layout-1 store to.
    static let currentVersion: UInt16 = 2
    /// Layout 3: format 2 after a key rotation, its items and records in directories named after
    /// the master key (docs/FORMAT.md, "Key rotation"). A build that knows only versions 1 and 2
    /// refuses it rather than looking in `items2/`.
    static let rotatedVersion: UInt16 = 3
    /// The on-disk version that records ``Facts``.
    static let factsVersion: UInt16 = 6
    /// The on-disk version of a store bound to its user (``Facts/boundUser``).
    static let boundVersion: UInt16 = 7
    static let supportedVersions: ClosedRange<UInt16> = 1...7
    /// Added to the layout's version when the store has a rollback counter (versions 4 and 5).
    static let rollbackProtectedOffset: UInt16 = 2
    static let maximumSealedKeySize = 4096
    static let fileName = "store.meta"
    static let maximumFileSize = 48 + maximumSealedKeySize + 32

    /// What a store was created for, fixed at its creation (or at the first open by a version
    /// that records it) and authenticated with the rest of store.meta.
    struct Facts: Equatable {
        var tpm: TPMKind
        var sharing: Sharing
        /// The user whose binding secret authorizes the master key; nil for a store not bound.
        /// Only a private store (``Sharing/owner``) is bound.
        var boundUser: UInt32? = nil
    }

    /// The item layout: 1, 2 or 3.
    var version: UInt16
    let storeID: [UInt8]
    /// Milliseconds since 1970, kept exact so a rewrite (a migration) keeps the same value.
    let createdMilliseconds: Int64
    var sealedMasterKey: SealedObject
    /// The NV index of the store's rollback counter; nil for a store without one.
    var rollbackCounter: UInt32?
    /// Nil for a file of versions 1 to 5, which did not record them.
    var facts: Facts?

    init(
        version: UInt16, storeID: [UInt8], createdMilliseconds: Int64, sealedMasterKey: SealedObject,
        rollbackCounter: UInt32?,
        facts: Facts?
    ) {
        precondition(facts == nil || version >= 2, "layout 1 has no version that records the store's facts")
        self.version = version
        self.storeID = storeID
        self.createdMilliseconds = createdMilliseconds
        self.sealedMasterKey = sealedMasterKey
        self.rollbackCounter = rollbackCounter
        self.facts = facts
    }

    /// The version written to disk.
    var storedVersion: UInt16 {
        if let facts { return facts.boundUser == nil ? Self.factsVersion : Self.boundVersion }
        return rollbackCounter == nil ? version : version + Self.rollbackProtectedOffset
    }

    var createdAt: Date { Date(timeIntervalSince1970: Double(createdMilliseconds) / 1000) }

    static var now: Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    /// The authenticated bytes, without the MAC.
    var body: [UInt8] {
        var writer = WireWriter()
        writer.append(raw: Self.magic)
        writer.append(storedVersion)
        writer.append(UInt16(0))
        writer.append(raw: storeID)
        writer.append(UInt64(bitPattern: createdMilliseconds))
        let sealed = sealedMasterKey.serialized()
        if let facts {
            writer.append(version)
            writer.append(facts.tpm.rawValue)
            switch facts.sharing {
            case .owner:
                writer.append(UInt8(facts.boundUser == nil ? 0 : 2))
                writer.append(facts.boundUser ?? 0)
            case .group(let group):
                writer.append(UInt8(1))
                writer.append(group)
            }
            writer.append(rollbackCounter ?? 0)
            writer.append(UInt32(sealed.count))
            writer.append(raw: sealed)
        } else {
            writer.append(UInt32(sealed.count))
            writer.append(raw: sealed)
            if let rollbackCounter { writer.append(rollbackCounter) }
        }
        return writer.bytes
    }

    func serialized(metadataKey: SymmetricKey) -> [UInt8] {
        let body = body
        return body + Array(HMAC<SHA256>.authenticationCode(for: body, using: metadataKey))
    }

    /// Parses the file; the MAC is checked by ``verify(_:metadataKey:)`` once the key is unsealed.
    ///
    /// - Throws: ``KeychainError`` `.tampered` or `.unsupportedVersion`.
    static func parse(_ bytes: [UInt8], path: String) throws(KeychainError) -> Parsed {
        return try KeychainError.parsing(
            { () throws in
                var reader = WireReader(bytes)
                guard try reader.readBytes(4) == magic else {
                    throw KeychainError(.tampered, "\(path) is not a TPMKeychain store (bad magic)")
                }
                let storedVersion = try reader.readUInt16()
                guard supportedVersions.contains(storedVersion) else {
                    throw KeychainError(
                        .unsupportedVersion,
                        "The store at \(path) has format version \(storedVersion); this build reads versions 1 to 7: upgrade TPMKeychain"
                    )
                }
                guard try reader.readUInt16() == 0 else {
                    throw KeychainError(.tampered, "\(path) is damaged: its reserved field is not zero")
                }
                let storeID = try reader.readBytes(16)
                let created = Int64(bitPattern: try reader.readUInt64())
                let version: UInt16
                let counter: UInt32?
                let facts: Facts?
                let sealed: SealedObject
                if storedVersion >= factsVersion {
                    version = try reader.readUInt16()
                    guard version == currentVersion || version == rotatedVersion else {
                        throw KeychainError(.tampered, "\(path) is damaged: item layout \(version) is not 2 or 3")
                    }
                    guard let tpm = TPMKind(rawValue: try reader.readUInt8()) else {
                        throw KeychainError(.tampered, "\(path) is damaged: it names no known kind of TPM")
                    }
                    let sharingKind = try reader.readUInt8()
                    let group = try reader.readUInt32()
                    switch (sharingKind, group, storedVersion) {
                    case (0, 0, factsVersion): facts = Facts(tpm: tpm, sharing: .owner)
                    case (1, _, factsVersion): facts = Facts(tpm: tpm, sharing: .group(group))
                    case (2, _, boundVersion): facts = Facts(tpm: tpm, sharing: .owner, boundUser: group)
                    default: throw KeychainError(.tampered, "\(path) is damaged: its sharing field is not valid")
                    }
                    let index = try reader.readUInt32()
                    counter = index == 0 ? nil : index
                    sealed = try readSealedKey(&reader, path: path)
                } else {
                    let protected = storedVersion > rotatedVersion
                    version = protected ? storedVersion - rollbackProtectedOffset : storedVersion
                    facts = nil
                    sealed = try readSealedKey(&reader, path: path)
                    counter = protected ? try reader.readUInt32() : nil
                }
                let authenticatedCount = bytes.count - reader.remaining
                let mac = try reader.readBytes(32)
                guard reader.remaining == 0 else { throw KeychainError(.tampered, "\(path) has trailing bytes") }
                return Parsed(
                    metadata: StoreMetadata(
                        version: version, storeID: storeID, createdMilliseconds: created, sealedMasterKey: sealed,
                        rollbackCounter: counter, facts: facts),
                    authenticatedBytes: Array(bytes[..<authenticatedCount]), mac: mac, path: path)
            }, damaged: { (error) in KeychainError(.tampered, "\(path) is damaged: \(error)", underlying: error) })
    }

    private static func readSealedKey(_ reader: inout WireReader, path: String) throws -> SealedObject {
        let sealedLength = Int(try reader.readUInt32())
        guard sealedLength <= maximumSealedKeySize else { throw KeychainError(.tampered, "\(path) is damaged") }
        return try SealedObject(serialized: try reader.readBytes(sealedLength))
    }

    /// The file as read: the decoded fields, and the bytes its MAC covers exactly as they were on disk.
    struct Parsed {
        let metadata: StoreMetadata
        let authenticatedBytes: [UInt8]
        let mac: [UInt8]
        let path: String

        /// - Throws: ``KeychainError`` `.tampered` unless the MAC authenticates the bytes read.
        func verify(metadataKey: SymmetricKey) throws(KeychainError) {
            guard HMAC<SHA256>.isValidAuthenticationCode(mac, authenticating: authenticatedBytes, using: metadataKey)
            else {
                throw KeychainError(.tampered, "\(path) failed authentication: the store's metadata was modified")
            }
        }
    }
}

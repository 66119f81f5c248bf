import Crypto
import Foundation
import TPM

/// `store.meta`, format version 1, 2 or 3 (docs/FORMAT.md, "store.meta"). All integers big-endian.
/// The version says how the items are stored: version 1 in `items/` (item format 1), version 2 in
/// `items2/` (item format 2), version 3 in `items2-<tag>/` (item format 2, after a key rotation);
/// the fields are the same.
///
///     offset size  field
///     0      4     magic "TKSM"
///     4      2     version = 1 or 2
///     6      2     reserved = 0
///     8      16    store ID (random UUID)
///     24     8     creation time, milliseconds since 1970
///     32     4     sealed master key length L (at most 4096)
///     36     L     the master key as a TPM sealed object (SealedObject, "TKSO"), which pins the
///                  storage key's name: another TPM is recognised before anything is decrypted
///     36+L   4     versions 4 and 5 only: the NV index of the store's rollback counter (its
///                  manifest's epochs are that counter's values; docs/FORMAT.md, "Manifest")
///     36+L(+4) 32  HMAC-SHA256(metadata key, every byte before it as read from disk); the metadata
///                  key is derived from the master key, so the store ID and everything else is
///                  authenticated once the TPM has unsealed the key
///
/// The MAC is checked over the bytes exactly as they are on disk, never over a re-encoding: a
/// field a parser ignores or normalises (the reserved bytes) cannot change unnoticed.
struct StoreMetadata {
    static let magic = Array("TKSM".utf8)
    /// What new stores are created with, and what a first write upgrades a version-1 store to.
    static let currentVersion: UInt16 = 2
    /// Version 3: format 2 after a key rotation, its items and records in directories named after
    /// the master key (docs/FORMAT.md, "Key rotation"). A build that knows only versions 1 and 2
    /// refuses it rather than looking in `items2/`.
    static let rotatedVersion: UInt16 = 3
    static let supportedVersions: ClosedRange<UInt16> = 1...5
    /// Added to the layout's version when the store has a rollback counter.
    static let rollbackProtectedOffset: UInt16 = 2
    static let maximumSealedKeySize = 4096
    static let fileName = "store.meta"
    static let maximumFileSize = 36 + maximumSealedKeySize + 4 + 32

    let version: UInt16
    let storeID: [UInt8]
    /// Milliseconds since 1970, kept exact so a rewrite (a migration) keeps the same value.
    let createdMilliseconds: Int64
    let sealedMasterKey: SealedObject
    /// The NV index of the store's rollback counter; nil for a store without one.
    let rollbackCounter: UInt32?

    /// The version written to disk.
    var storedVersion: UInt16 { rollbackCounter == nil ? version : version + Self.rollbackProtectedOffset }

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
        writer.append(UInt32(sealed.count))
        writer.append(raw: sealed)
        if let rollbackCounter { writer.append(rollbackCounter) }
        return writer.bytes
    }

    func serialized(metadataKey: SymmetricKey) -> [UInt8] {
        let body = body
        return body + Array(HMAC<SHA256>.authenticationCode(for: body, using: metadataKey))
    }

    /// Parses the file; the MAC is checked by ``verify(_:metadataKey:)`` once the key is unsealed.
    ///
    /// - Throws: ``StoreError`` `.tampered` or `.unsupportedVersion`.
    static func parse(_ bytes: [UInt8], path: String) throws(StoreError) -> Parsed {
        do {
            var reader = WireReader(bytes)
            guard try reader.readBytes(4) == magic else {
                throw StoreError(.tampered, "\(path) is not a TPMKeychain store (bad magic)")
            }
            let storedVersion = try reader.readUInt16()
            guard supportedVersions.contains(storedVersion) else {
                throw StoreError(.unsupportedVersion, "The store at \(path) has format version \(storedVersion); this build reads versions 1 to 5: upgrade TPMKeychain")
            }
            let protected = storedVersion > rotatedVersion
            let version = protected ? storedVersion - rollbackProtectedOffset : storedVersion
            guard try reader.readUInt16() == 0 else {
                throw StoreError(.tampered, "\(path) is damaged: its reserved field is not zero")
            }
            let storeID = try reader.readBytes(16)
            let created = Int64(bitPattern: try reader.readUInt64())
            let sealedLength = Int(try reader.readUInt32())
            guard sealedLength <= maximumSealedKeySize else { throw StoreError(.tampered, "\(path) is damaged") }
            let sealed = try SealedObject(serialized: try reader.readBytes(sealedLength))
            let counter = protected ? try reader.readUInt32() : nil
            let authenticatedCount = bytes.count - reader.remaining
            let mac = try reader.readBytes(32)
            guard reader.remaining == 0 else { throw StoreError(.tampered, "\(path) has trailing bytes") }
            return Parsed(metadata: StoreMetadata(version: version, storeID: storeID, createdMilliseconds: created, sealedMasterKey: sealed,
                                                   rollbackCounter: counter),
                          authenticatedBytes: Array(bytes[..<authenticatedCount]), mac: mac, path: path)
        } catch let error as StoreError {
            throw error
        } catch {
            throw StoreError(.tampered, "\(path) is damaged: \(error)", underlying: error as? TPMError)
        }
    }

    /// The file as read: the decoded fields, and the bytes its MAC covers exactly as they were on disk.
    struct Parsed {
        let metadata: StoreMetadata
        let authenticatedBytes: [UInt8]
        let mac: [UInt8]
        let path: String

        /// - Throws: ``StoreError`` `.tampered` unless the MAC authenticates the bytes read.
        func verify(metadataKey: SymmetricKey) throws(StoreError) {
            guard HMAC<SHA256>.isValidAuthenticationCode(mac, authenticating: authenticatedBytes, using: metadataKey) else {
                throw StoreError(.tampered, "\(path) failed authentication: the store's metadata was modified")
            }
        }
    }
}

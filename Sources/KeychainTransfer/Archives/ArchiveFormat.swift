package import Crypto
import CryptoExtras
import FoundationEssentials
import KeychainService
package import KeychainVocabulary
package import SystemCalls
import WireFormat

/// The export archive, "TKAR" version 1 (docs/FORMAT.md, "Export archives"): a plaintext header
/// that says how the archive key is derived, then a STREAM of AES-256-GCM chunks (Hoang,
/// Reyhanitabar, Rogaway, Vizár, "Online authenticated-encryption and its nonce-reuse
/// misuse-resistance", 2015): chunk i is sealed under nonce (i, final flag), so a chunk changed,
/// dropped, repeated, reordered or cut off after is refused, and the archive key is derived with
/// the whole header as HKDF info, so a header byte changed makes every chunk fail.
///
/// Every integer is big-endian. One chunk holds one record: a begin record (creation time), the
/// items, and an end record (the number of items) in the final chunk.
package enum ArchiveFormat {
    package static let magic: [UInt8] = Array("TKAR".utf8)
    package static let version: UInt8 = 1

    /// How the archive key is derived: byte 5 of the header.
    package enum Kind: UInt8, Sendable {
        /// scrypt of a passphrase.
        case passphrase = 1
        /// ECDH between a key made for the archive and a device import key that lives in a TPM.
        case deviceKey = 2
    }

    package enum RecordType: UInt8 {
        case begin = 1
        case item = 2
        case end = 3
    }

    /// The largest record: an item's value at its limit, plus attributes and framing.
    static let maximumRecord = ItemValue.maximumSize + (4 << 20)
    static let tagSize = 16
    static let saltSize = 32
    static let fingerprintSize = 32
    static let publicKeySize = 65

    // MARK: Header

    /// The header as written; its bytes (``encoded``) are the HKDF info's tail.
    package struct Header: Sendable, Equatable {
        package enum Protection: Sendable, Equatable {
            case passphrase(KeychainArchive.PassphraseCost)
            /// `fingerprint`: SHA-256 of the device import key (X9.63); `ephemeralPublicKey`:
            /// the key made for this archive (X9.63).
            case deviceKey(fingerprint: [UInt8], ephemeralPublicKey: [UInt8])
        }

        package var protection: Protection
        package var salt: [UInt8]

        package var encoded: [UInt8] {
            var writer = WireWriter()
            writer.append(raw: ArchiveFormat.magic)
            writer.append(ArchiveFormat.version)
            switch protection {
            case .passphrase(let cost):
                writer.append(Kind.passphrase.rawValue)
                writer.append(cost.log2N)
                writer.append(cost.blockSize)
                writer.append(cost.parallelism)
            case .deviceKey(let fingerprint, let ephemeralPublicKey):
                writer.append(Kind.deviceKey.rawValue)
                writer.append(raw: fingerprint)
                writer.append(raw: ephemeralPublicKey)
            }
            writer.append(raw: salt)
            return writer.bytes
        }

        /// Reads the header from the start of `file`.
        ///
        /// - Throws: ``KeychainError`` `.decodingFailed` for a file that is not an archive,
        ///   `.unsupportedVersion` for a later version, `.tampered` for a header cut short or
        ///   with parameters no writer produces.
        package static func read(from file: StreamingInputFile) throws(KeychainError) -> Header {
            let start = try ArchiveFormat.read(file, 6)
            guard start.count == 6, Array(start[0..<4]) == ArchiveFormat.magic else {
                throw KeychainError(.decodingFailed, "\(file.path) is not a tpm-keychain export archive")
            }
            guard start[4] == ArchiveFormat.version else {
                throw KeychainError(
                    .unsupportedVersion,
                    "\(file.path) is an archive of version \(start[4]); this build reads version \(ArchiveFormat.version)"
                )
            }
            switch Kind(rawValue: start[5]) {
            case .passphrase:
                let rest = try ArchiveFormat.read(file, 5 + saltSize)
                guard rest.count == 5 + saltSize else { throw truncated(file) }
                var reader = WireReader(rest)
                do {
                    let cost = KeychainArchive.PassphraseCost(
                        log2N: try reader.readUInt8(), blockSize: try reader.readUInt16(),
                        parallelism: try reader.readUInt16())
                    guard cost.isReadable else {
                        throw KeychainError(
                            .tampered, "\(file.path) asks for scrypt parameters outside what any export uses (\(cost))")
                    }
                    return Header(protection: .passphrase(cost), salt: try reader.readBytes(saltSize))
                } catch let error as KeychainError {
                    throw error
                } catch {
                    throw truncated(file)
                }
            case .deviceKey:
                let rest = try ArchiveFormat.read(file, fingerprintSize + publicKeySize + saltSize)
                guard rest.count == fingerprintSize + publicKeySize + saltSize else { throw truncated(file) }
                return Header(
                    protection: .deviceKey(
                        fingerprint: Array(rest[0..<fingerprintSize]),
                        ephemeralPublicKey: Array(rest[fingerprintSize..<fingerprintSize + publicKeySize])),
                    salt: Array(rest[(fingerprintSize + publicKeySize)...]))
            case nil:
                throw KeychainError(
                    .unsupportedVersion, "\(file.path) is protected in a way this build does not know (\(start[5]))")
            }
        }

        private static func truncated(_ file: StreamingInputFile) -> KeychainError {
            KeychainError(.tampered, "\(file.path) ends inside its header: the archive is truncated")
        }
    }

    /// The archive key: HKDF-SHA256 of the secret the protection gives (scrypt output, ECDH
    /// x-coordinate), salted with the header's salt, info "TPMKeychain archive v1" ‖ header.
    package static func archiveKey(secret: SymmetricKey, header: Header) -> SymmetricKey {
        HKDF<SHA256>.deriveKey(
            inputKeyMaterial: secret, salt: header.salt, info: Array("TPMKeychain archive v1".utf8) + header.encoded,
            outputByteCount: 32)
    }

    /// scrypt(passphrase, salt, N, r, p), 32 bytes.
    package static func passphraseSecret(
        _ passphrase: [UInt8], cost: KeychainArchive.PassphraseCost, salt: [UInt8]
    ) throws(KeychainError) -> SymmetricKey {
        do {
            return try KDF.Scrypt.deriveKey(
                from: passphrase, salt: salt, outputByteCount: 32, rounds: 1 << Int(cost.log2N),
                blockSize: Int(cost.blockSize), parallelism: Int(cost.parallelism))
        } catch {
            throw KeychainError(.storageFailed, "scrypt failed (\(cost)): \(error)", underlying: error)
        }
    }

    // MARK: Chunks

    /// Nonce of chunk `index`: the index (8 bytes), three zero bytes, then 1 for the final
    /// chunk and 0 for the others.
    static func nonce(_ index: UInt64, final: Bool) -> AES.GCM.Nonce {
        var bytes = BigEndian.bytes(index)
        bytes += [0, 0, 0, final ? 1 : 0]
        // Twelve bytes is always a valid GCM nonce.
        guard let nonce = try? AES.GCM.Nonce(data: bytes) else { preconditionFailure("a 12-byte GCM nonce") }
        return nonce
    }

    static func read(_ file: StreamingInputFile, _ count: Int) throws(KeychainError) -> [UInt8] {
        do {
            return try file.read(upTo: count)
        } catch {
            throw KeychainError(.storageFailed, "Cannot read \(file.path): \(error)", underlying: error)
        }
    }

    // MARK: Records

    /// An item record: type, class (UINT32), accessibility, value kind, then the attributes
    /// (UINT32 length + docs/FORMAT.md's "Attributes, format 2" encoding) and the value (UINT32
    /// length + bytes).
    package static func itemRecord(_ item: TransferItem) -> [UInt8] {
        let attributes = item.attributes.encoded()
        var bytes: [UInt8] = []
        bytes.reserveCapacity(15 + attributes.count + item.value.bytes.count)
        bytes.append(RecordType.item.rawValue)
        BigEndian.append(item.itemClass.rawValue, to: &bytes)
        bytes.append(item.accessibility.rawValue)
        bytes.append(item.value.kind.rawValue)
        BigEndian.append(UInt32(attributes.count), to: &bytes)
        bytes += attributes
        BigEndian.append(UInt32(item.value.bytes.count), to: &bytes)
        bytes += item.value.bytes
        return bytes
    }

    /// The begin record: type, then INT64 nanoseconds since 1970 (when the export began).
    package static func beginRecord(created: Int64) -> [UInt8] {
        [RecordType.begin.rawValue] + BigEndian.bytes(UInt64(bitPattern: created))
    }

    /// The end record, in the final chunk: type, then UINT64 the number of item records.
    package static func endRecord(count: UInt64) -> [UInt8] {
        [RecordType.end.rawValue] + BigEndian.bytes(count)
    }

    package enum Record {
        case begin(created: Int64)
        case item(TransferItem)
        case end(count: UInt64)
    }

    /// - Throws: ``KeychainError`` `.tampered`: an authenticated record that does not parse
    ///   was written by no build of ours.
    package static func record(_ bytes: [UInt8], path: String) throws(KeychainError) -> Record {
        var reader = WireReader(bytes)
        do {
            let record: Record
            switch RecordType(rawValue: try reader.readUInt8()) {
            case .begin:
                record = .begin(created: Int64(bitPattern: try reader.readUInt64()))
            case .end:
                record = .end(count: try reader.readUInt64())
            case .item:
                guard let itemClass = ItemClass(rawValue: try reader.readUInt32()),
                    let accessibility = Accessibility(rawValue: try reader.readUInt8()),
                    let kind = ValueKind(rawValue: try reader.readUInt8())
                else {
                    throw KeychainError(
                        .tampered, "\(path) holds an item of a class, accessibility or kind unknown here")
                }
                let attributeBytes = try reader.readBytes(Int(try reader.readUInt32()))
                let attributes = try AttributeList(decoding: attributeBytes, path: path)
                let value = try reader.readBytes(Int(try reader.readUInt32()))
                record = .item(
                    TransferItem(
                        itemClass: itemClass, accessibility: accessibility, attributes: attributes,
                        value: ItemValue(kind: kind, bytes: value)))
            case nil:
                throw KeychainError(.tampered, "\(path) holds a record of an unknown type")
            }
            guard reader.remaining == 0 else {
                throw KeychainError(.tampered, "\(path) holds a record with bytes after its end")
            }
            return record
        } catch let error as KeychainError {
            throw error
        } catch {
            throw KeychainError(.tampered, "\(path) holds a truncated record", underlying: error)
        }
    }
}

/// Writes an archive's chunks, one record each, in order.
package final class ArchiveWriter {
    private let file: StreamingOutputFile
    private let key: SymmetricKey
    private var index: UInt64 = 0

    /// Writes the header.
    package init(file: StreamingOutputFile, header: ArchiveFormat.Header, key: SymmetricKey) throws(KeychainError) {
        self.file = file
        self.key = key
        try write(header.encoded)
    }

    /// Seals `record` as the next chunk; `final` for the end record, after which nothing is written.
    package func append(_ record: [UInt8], final: Bool = false) throws(KeychainError) {
        let length = BigEndian.bytes(UInt32(record.count + ArchiveFormat.tagSize))
        let sealed: AES.GCM.SealedBox
        do {
            sealed = try AES.GCM.seal(
                record, using: key, nonce: ArchiveFormat.nonce(index, final: final), authenticating: length)
        } catch {
            throw KeychainError(.storageFailed, "Cannot seal an archive chunk: \(error)", underlying: error)
        }
        index += 1
        try write(length)
        try write(sealed.ciphertext)
        try write(sealed.tag)
    }

    private func write(_ bytes: some Collection<UInt8>) throws(KeychainError) {
        do {
            try file.write(bytes)
        } catch {
            throw KeychainError(.storageFailed, "Cannot write \(file.path): \(error)", underlying: error)
        }
    }
}

/// Reads an archive's chunks after its header, opening and checking each.
package final class ArchiveReader {
    private let file: StreamingInputFile
    private let key: SymmetricKey
    private var index: UInt64 = 0
    private var nextLength: [UInt8]?
    private var ended = false

    /// `file` positioned just after the header.
    package init(file: StreamingInputFile, key: SymmetricKey) {
        self.file = file
        self.key = key
    }

    /// The next record's plaintext and whether it was the final chunk; nil after the final one.
    ///
    /// - Throws: ``KeychainError`` `.authenticationFailed` when the first chunk does not open
    ///   (a wrong passphrase, or a changed header), `.tampered` for any later chunk changed,
    ///   moved or missing, the archive cut short, or bytes after its final chunk.
    package func next() throws(KeychainError) -> (record: [UInt8], final: Bool)? {
        if ended {
            guard try ArchiveFormat.read(file, 1).isEmpty else {
                throw KeychainError(.tampered, "\(file.path) has bytes after its final chunk")
            }
            return nil
        }
        let lengthBytes: [UInt8]
        if let nextLength { lengthBytes = nextLength } else { lengthBytes = try ArchiveFormat.read(file, 4) }
        guard lengthBytes.count == 4 else { throw truncated() }
        let length = Int(BigEndian.integer(lengthBytes) as UInt32)
        guard length >= ArchiveFormat.tagSize, length <= ArchiveFormat.maximumRecord + ArchiveFormat.tagSize else {
            throw damaged("a chunk of impossible length \(length)")
        }
        let chunk = try ArchiveFormat.read(file, length)
        guard chunk.count == length else { throw truncated() }
        // The final chunk is the one the file ends after; a cut-off archive then fails here.
        let following = try ArchiveFormat.read(file, 4)
        let final = following.isEmpty
        nextLength = following
        let record: [UInt8]
        do {
            let box = try AES.GCM.SealedBox(
                nonce: ArchiveFormat.nonce(index, final: final), ciphertext: chunk.dropLast(ArchiveFormat.tagSize),
                tag: chunk.suffix(ArchiveFormat.tagSize))
            record = Array(try AES.GCM.open(box, using: key, authenticating: lengthBytes))
        } catch {
            // Opening as a middle chunk tells an archive cut off right after this chunk.
            if final,
                (try? AES.GCM.open(
                    AES.GCM.SealedBox(
                        nonce: ArchiveFormat.nonce(index, final: false),
                        ciphertext: chunk.dropLast(ArchiveFormat.tagSize),
                        tag: chunk.suffix(ArchiveFormat.tagSize)), using: key, authenticating: lengthBytes)) != nil
            {
                throw truncated()
            }
            if index == 0 {
                throw KeychainError(
                    .authenticationFailed,
                    "\(file.path) does not open with this key: the passphrase is wrong, or the archive was altered")
            }
            throw damaged("chunk \(index) does not authenticate")
        }
        index += 1
        ended = final
        return (record, final)
    }

    private func truncated() -> KeychainError {
        KeychainError(.tampered, "\(file.path) ends before its final chunk: the archive is truncated or altered")
    }

    private func damaged(_ what: String) -> KeychainError {
        KeychainError(.tampered, "\(file.path) was altered: \(what)")
    }
}

import Crypto
import TPM

/// A key record, `keys/<record ID as 32 hex digits>.key` (docs/FORMAT.md, "Key records"): a 32-byte
/// key sealed by the TPM under the record's own policy, from which the keys of the items that
/// name the record derive. The store's master key (in store.meta) is record zero; every other
/// record is one of these files. All integers big-endian.
///
///     offset size  field
///     0      4     magic "TKKR"
///     4      2     version = 1
///     6      2     reserved = 0
///     8      16    store ID
///     24     16    record ID (random, never all zero)
///     40     1     accessibility class the record serves (``AccessibilityClass``)
///     41     1     flags: bit 0 passcode (the sealed key's policy starts with PolicyAuthValue and
///                  the object is DA-protected), bit 1 NV-bound (the policy ends with PolicyNV:
///                  counter at `counter index` equal to `counter value`); other bits 0
///     42     2     reserved = 0
///     44     4     counter index (0 unless NV-bound)
///     48     8     counter value (0 unless NV-bound)
///     56     2     sealed object length L (at most 4096)
///     58     L     the key, sealed (``SealedObject``, "TKSO")
///     58+L   32    HMAC-SHA256(metadata key, "TPMKeychain key record" || bytes 0 ..< 58+L, as read)
///
/// The MAC, under a key only the master key yields, means a record cannot be moved from another
/// store, nor its flags edited to drop the passcode (downgrading an item's protection is
/// tampering). A passcode change reseals the same key in a new record file and rewrites no item;
/// with an NV-bound record the counter is incremented first, so an old copy of the file put back
/// no longer satisfies its own policy.
struct KeyRecord: Sendable, Equatable {
    static let magic = Array("TKKR".utf8)
    static let version: UInt16 = 1
    static let macDomain = Array("TPMKeychain key record".utf8)
    static let maximumSealedSize = 4096

    struct Flags: OptionSet, Sendable, Equatable {
        let rawValue: UInt8
        static let passcode = Flags(rawValue: 1 << 0)
        static let counterBound = Flags(rawValue: 1 << 1)
    }

    let storeID: [UInt8]
    let recordID: [UInt8]
    let accessibility: AccessibilityClass
    let flags: Flags
    let counterIndex: UInt32
    let counterValue: UInt64
    let sealedKey: SealedObject

    /// The file name for a record ID.
    static func fileName(_ recordID: [UInt8]) -> String {
        recordID.hexString + ".key"
    }

    /// The policy the sealed key needs, rebuilt from the authenticated fields (never trusted from
    /// the sealed object alone): ``TPMConnection/unseal(_:policy:authValue:)`` refuses a sealed
    /// object whose own policy differs.
    func policy(counterName: [UInt8]) -> Policy {
        // PolicyAuthValue always, as for the master key: without the passcode flag the auth value
        // is empty and the object noDA; with it, the passcode is the auth value.
        var assertions: [PolicyAssertion] = [.authValue]
        if flags.contains(.counterBound) {
            var operand = WireWriter()
            operand.append(counterValue)
            assertions.append(.nv(index: counterIndex, indexName: counterName, operand: operand.bytes, offset: 0, comparison: .equal))
        }
        return Policy(assertions)
    }

    /// The item-key parent of the items that name this record.
    static func itemKeyParent(recordKey: SymmetricKey, storeID: [UInt8], recordID: [UInt8]) -> SymmetricKey {
        HKDF<SHA256>.deriveKey(inputKeyMaterial: recordKey, salt: storeID,
                               info: Array("TPMKeychain v2 record item keys".utf8) + recordID, outputByteCount: 32)
    }

    func serialized(metadataKey: SymmetricKey) -> [UInt8] {
        var writer = WireWriter()
        writer.append(raw: Self.magic)
        writer.append(Self.version)
        writer.append(UInt16(0))
        writer.append(raw: storeID)
        writer.append(raw: recordID)
        writer.append(accessibility.rawValue)
        writer.append(flags.rawValue)
        writer.append(UInt16(0))
        writer.append(counterIndex)
        writer.append(counterValue)
        let sealed = sealedKey.serialized()
        writer.append(UInt16(sealed.count))
        writer.append(raw: sealed)
        let body = writer.bytes
        return body + Array(HMAC<SHA256>.authenticationCode(for: Self.macDomain + body, using: metadataKey))
    }

    /// Parses and authenticates a record file.
    ///
    /// - Throws: ``StoreError`` `.tampered` for anything no writer produces, a record of
    ///   another store, or a MAC that does not match the bytes as read.
    init(parsing bytes: [UInt8], storeID expectedStoreID: [UInt8], metadataKey: SymmetricKey, path: String) throws(StoreError) {
        do {
            var reader = WireReader(bytes)
            guard try reader.readBytes(4) == Self.magic, try reader.readUInt16() == Self.version, try reader.readUInt16() == 0 else {
                throw StoreError(.tampered, "\(path) is not a version-1 key record")
            }
            storeID = try reader.readBytes(16)
            recordID = try reader.readBytes(16)
            let accessibility = AccessibilityClass(rawValue: try reader.readUInt8())
            flags = Flags(rawValue: try reader.readUInt8())
            let reserved = try reader.readUInt16()
            counterIndex = try reader.readUInt32()
            counterValue = try reader.readUInt64()
            let sealedLength = Int(try reader.readUInt16())
            guard let accessibility, reserved == 0, flags.rawValue & ~0b11 == 0, sealedLength <= Self.maximumSealedSize,
                  recordID != ItemFileV2.masterKeyRecord, flags.contains(.counterBound) || (counterIndex == 0 && counterValue == 0) else {
                throw StoreError(.tampered, "\(path) is a damaged key record")
            }
            self.accessibility = accessibility
            let sealed = try reader.readBytes(sealedLength)
            let authenticatedCount = bytes.count - reader.remaining
            let mac = try reader.readBytes(32)
            guard reader.remaining == 0 else { throw StoreError(.tampered, "\(path) has trailing bytes") }
            guard HMAC<SHA256>.isValidAuthenticationCode(mac, authenticating: Self.macDomain + bytes[..<authenticatedCount],
                                                         using: metadataKey) else {
                throw StoreError(.tampered, "\(path) failed authentication: the key record was modified or belongs to another store")
            }
            guard storeID == expectedStoreID else {
                throw StoreError(.tampered, "\(path) belongs to another keychain store")
            }
            sealedKey = try SealedObject(serialized: sealed)
        } catch let error as StoreError {
            throw error
        } catch {
            throw StoreError(.tampered, "\(path) is a damaged key record", underlying: error)
        }
    }

    init(storeID: [UInt8], recordID: [UInt8], accessibility: AccessibilityClass, flags: Flags, counterIndex: UInt32 = 0,
         counterValue: UInt64 = 0, sealedKey: SealedObject) {
        self.storeID = storeID
        self.recordID = recordID
        self.accessibility = accessibility
        self.flags = flags
        self.counterIndex = counterIndex
        self.counterValue = counterValue
        self.sealedKey = sealedKey
    }
}

import Crypto
import FoundationEssentials
import SystemCalls
import TPM
import WireFormat

/// Keys derived from the store's master key with HKDF-SHA256, one per purpose (domain separation).
///
/// The master key itself is dropped once these exist; `SymmetricKey` zeroizes its storage when
/// released, so closing the store erases every key.
///
/// A class: every get copies the store's open state, and with the keys inline that copy
/// retained and released each of the five keys and the prepared HMAC.
final class StoreKeys: Sendable {
    /// Parent of the per-write item keys.
    let items: SymmetricKey
    /// Keys the file and directory names, so names reveal nothing about services and accounts.
    let names: SymmetricKey
    /// Authenticates store.meta.
    let metadata: SymmetricKey
    /// Chains the manifest's records (rollback protection).
    let manifest: SymmetricKey
    /// The authorization value of the store's rollback counter in the TPM: only a holder of the
    /// master key can move it, or read it with a response the TPM authenticates.
    let counterAuthorization: SymmetricKey
    /// HMAC-SHA256 keyed with ``names``, before any data: copied for every name, so the key's
    /// two padded blocks are hashed once per store, not once per name (a listing makes one name
    /// per item).
    private let namesMAC: PreparedHMAC
    /// The manifest's record MAC keyed with ``manifest``, set up once: every write encodes and
    /// applies two records.
    let manifestMAC: Manifest.RecordMAC

    static let itemsInfo = Array("TPMKeychain v1 item keys".utf8)
    static let namesInfo = Array("TPMKeychain v1 names".utf8)
    static let metadataInfo = Array("TPMKeychain v1 metadata".utf8)
    static let itemKeyInfo = Array("TPMKeychain v1 item".utf8)
    static let manifestInfo = Array("TPMKeychain manifest".utf8)
    static let counterInfo = Array("TPMKeychain rollback counter authorization".utf8)

    init(masterKey: SymmetricKey, storeID: [UInt8]) {
        // OneBlockHKDF: the same bytes as swift-crypto's HKDF<SHA256> of 32 bytes (ManifestMACTests).
        // Every open derives these; swift-crypto's generic HKDF makes its key from a Slice through
        // unspecialized code, whose first use walks the binary's conformance records (0.3 ms of a
        // CLI lookup).
        let storeID = storeID[...]
        items = OneBlockHKDF.deriveKey(inputKeyMaterial: masterKey, salt: storeID, info: Self.itemsInfo[...])
        names = OneBlockHKDF.deriveKey(inputKeyMaterial: masterKey, salt: storeID, info: Self.namesInfo[...])
        metadata = OneBlockHKDF.deriveKey(inputKeyMaterial: masterKey, info: Self.metadataInfo[...])
        manifest = OneBlockHKDF.deriveKey(inputKeyMaterial: masterKey, salt: storeID, info: Self.manifestInfo[...])
        counterAuthorization = OneBlockHKDF.deriveKey(
            inputKeyMaterial: masterKey, salt: storeID, info: Self.counterInfo[...])
        namesMAC = PreparedHMAC(key: names)
        manifestMAC = Manifest.RecordMAC(key: manifest)
    }

    /// The AES-256-GCM key of one write: a fresh 32-byte salt per write means no (key, nonce) pair
    /// can repeat in practice, however many items a store sees.
    func itemKey(salt: [UInt8], storeID: [UInt8]) -> SymmetricKey {
        OneBlockHKDF.deriveKey(inputKeyMaterial: items, salt: salt[...], info: Self.itemKeyInfo[...], storeID[...])
    }

    /// 128 bits of HMAC-SHA256 over length-prefixed fields, as lower-case hex.
    func name(_ domain: String, _ fields: [String]) -> String {
        var message = Array(domain.utf8)
        for field in fields {
            let bytes = Array(field.utf8)
            BigEndian.append(UInt32(bytes.count), to: &message)
            message.append(contentsOf: bytes)
        }
        return name(message: message)
    }

    /// Format 2's names: 128 bits of HMAC-SHA256(names key, domain || encoded), as lower-case hex.
    /// An item file is named by its class's primary key ("item2"); its directory by the class,
    /// access group and service or server ("group2"): see ``ItemFileV2``.
    func name(_ domain: String, encoded: [UInt8]) -> String {
        hex(namesMAC.authenticationCode(Array(domain.utf8)[...], encoded[...]))
    }

    private func name(message: [UInt8]) -> String {
        hex(namesMAC.authenticationCode(message[...]))
    }

    private func hex(_ digest: SHA256.Digest) -> String {
        digest.withUnsafeBytes { Array($0.prefix(16)) }.hexString
    }
}

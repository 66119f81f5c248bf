import Crypto
import KeychainVocabulary
import SystemCalls
import TPM
import WireFormat

/// `recovery.key`: the store's master key, encrypted to a recovery key the user keeps
/// (docs/FORMAT.md, "Recovery key"). All integers big-endian.
///
///     offset size  field
///     0      4     magic "TKRC"
///     4      2     version = 1
///     6      2     reserved = 0
///     8      16    store ID
///     24     8     key generation: the first 8 bytes of the master key's tag (ItemStore.keyGenerationTag)
///     32     32    recovery public key: X25519, its private key is the recovery key (32 random bytes)
///     64     32    ephemeral public key (X25519, new for every write)
///     96     12    nonce (random)
///     108    48    AES-256-GCM(K, nonce, master key (32 bytes), AAD = bytes 0 ..< 108): ciphertext ‖ tag
///     156    32    (version 2) HMAC-SHA256(metadata key of the master key it holds,
///                  "TPMKeychain recovery key" ‖ bytes 0 ..< 156)
///
/// The MAC is what a rotation checks before it encrypts a new master key to the recovery public
/// key: without it, whoever could write the store's directory (a backup agent, a file-sync
/// service, another machine sharing the home) could plant a public key of their own and receive
/// the next master key. Version 1 (no MAC) is still opened by a recovery, but a rotation refuses
/// it: add a new recovery key first.
///
/// K = HKDF-SHA256(IKM = X25519(ephemeral, recovery public key), salt = ephemeral public key ‖
/// recovery public key, info = "TPMKeychain recovery key" ‖ store ID). The master key is encrypted
/// *to* the recovery key's public half, so a key rotation re-encrypts the new master key for the
/// same recovery key without knowing it; only the person who holds the recovery key opens it.
struct RecoveryFile {
    static let fileName = "recovery.key"
    /// A rotation's copy for the new master key, renamed over ``fileName`` after the commit.
    static let nextFileName = "recovery.key.next"
    static let magic = Array("TKRC".utf8)
    static let version: UInt16 = 2
    /// Version 1's size: no MAC.
    static let unauthenticatedSize = 108 + 48
    static let size = unauthenticatedSize + 32
    static let info = Array("TPMKeychain recovery key".utf8)

    /// The fields readable without the recovery key.
    struct Header {
        let version: UInt16
        let storeID: [UInt8]
        let keyGeneration: [UInt8]
        let recoveryPublicKey: [UInt8]
    }

    /// The public half of a recovery key.
    static func publicKey(of recoveryKey: SecretBytes) throws(KeychainError) -> [UInt8] {
        do {
            return try recoveryKey.withUnsafeBytes { raw in
                Array(try Curve25519.KeyAgreement.PrivateKey(rawRepresentation: raw).publicKey.rawRepresentation)
            }
        } catch {
            throw KeychainError(.invalidParameter, "Not a recovery key", underlying: error)
        }
    }

    /// Encrypts `masterKey` to the recovery key whose public half is `recoveryPublicKey`, and
    /// authenticates the file with `metadataKey` (the metadata key of that same master key).
    static func seal(
        masterKey: SecretBytes, recoveryPublicKey: [UInt8], storeID: [UInt8], keyGeneration: [UInt8],
        metadataKey: SymmetricKey
    ) throws(KeychainError) -> [UInt8] {
        do {
            var header = WireWriter()
            header.append(raw: magic)
            header.append(version)
            header.append(UInt16(0))
            header.append(raw: storeID)
            header.append(raw: Array(keyGeneration.prefix(8)))
            header.append(raw: recoveryPublicKey)
            let body = try RecoveryBox.seal(
                masterKey, after: header.bytes, recoveryPublicKey: recoveryPublicKey, info: info, storeID: storeID)
            return body + mac(body, metadataKey: metadataKey)
        } catch {
            throw KeychainError(
                .storageFailed, "Encrypting the recovery copy of the master key failed", underlying: error)
        }
    }

    /// The fields of a recovery file, checked for shape.
    ///
    /// - Throws: ``KeychainError`` `.tampered` for a file no writer produces.
    static func header(_ bytes: [UInt8], path: String) throws(KeychainError) -> Header {
        guard bytes.count >= unauthenticatedSize, Array(bytes[0..<4]) == magic, bytes[6] == 0, bytes[7] == 0 else {
            throw KeychainError(.tampered, "\(path) is not a recovery file")
        }
        let version: UInt16 = BigEndian.integer(bytes[4..<6])
        guard (version == 1 && bytes.count == unauthenticatedSize) || (version == 2 && bytes.count == size) else {
            throw KeychainError(.tampered, "\(path) is not a version-1 or version-2 recovery file")
        }
        return Header(
            version: version, storeID: Array(bytes[8..<24]), keyGeneration: Array(bytes[24..<32]),
            recoveryPublicKey: Array(bytes[32..<64]))
    }

    /// The header of a file this store wrote for the master key whose metadata key is
    /// `metadataKey`: version 2, its MAC valid.
    ///
    /// - Throws: ``KeychainError`` `.tampered` for a version-1 file (unauthenticated), a file of
    ///   another store or key, or one whose MAC fails.
    static func authenticatedHeader(
        _ bytes: [UInt8], metadataKey: SymmetricKey, path: String
    ) throws(KeychainError) -> Header {
        let header = try header(bytes, path: path)
        guard header.version == 2 else {
            throw KeychainError(
                .tampered,
                "\(path) is a version-1 recovery file, which nothing authenticates: a new recovery key must be added before the master key is rotated"
            )
        }
        guard
            constantTimeEqual(
                mac(Array(bytes[0..<unauthenticatedSize]), metadataKey: metadataKey), bytes[unauthenticatedSize...])
        else {
            throw KeychainError(
                .tampered,
                "\(path) fails authentication: it was not written by this store (a recovery public key planted by someone who can write the store's directory?). Nothing was encrypted to it; a new recovery key must be added"
            )
        }
        return header
    }

    private static func mac(_ body: [UInt8], metadataKey: SymmetricKey) -> [UInt8] {
        Array(HMAC<SHA256>.authenticationCode(for: info + body, using: metadataKey))
    }

    /// The master key, if `recoveryKey` is the one this file was made for.
    ///
    /// - Throws: ``KeychainError`` `.authenticationFailed` for another recovery key, `.tampered` for a
    ///   file no writer produces, of another store, or that fails authentication.
    static func open(
        _ bytes: [UInt8], recoveryKey: SecretBytes, storeID: [UInt8], path: String
    ) throws(KeychainError) -> SecretBytes {
        let header = try header(bytes, path: path)
        guard header.storeID == storeID else { throw KeychainError(.tampered, "\(path) belongs to another store") }
        guard try publicKey(of: recoveryKey) == header.recoveryPublicKey else {
            throw KeychainError(
                .authenticationFailed,
                "That recovery key does not open this store: check it for typos (it is the one shown when the recovery key was added)"
            )
        }
        do {
            return try RecoveryBox.open(
                bytes, headerSize: 64, recoveryKey: recoveryKey, recoveryPublicKey: header.recoveryPublicKey,
                info: info,
                storeID: storeID)
        } catch {
            throw KeychainError(
                .tampered, "\(path) is damaged: the recovery key is right but the file fails authentication",
                underlying: error)
        }
    }

    // MARK: The key as a person writes it down

    /// systemd-cryptenroll's alphabet ("modhex"): no letters that read alike, and the same keys
    /// on most keyboard layouts.
    static let alphabet = Array("cbdefghijklnrtuv".utf8)

    /// 32 bytes as 8 groups of 8 modhex characters joined by dashes.
    static func text(of key: SecretBytes) -> String {
        key.withUnsafeBytes { raw in
            var characters: [UInt8] = []
            for (index, byte) in raw.enumerated() {
                if index > 0 && index % 4 == 0 { characters.append(UInt8(ascii: "-")) }
                characters.append(alphabet[Int(byte >> 4)])
                characters.append(alphabet[Int(byte & 0x0F)])
            }
            return String(decoding: characters, as: UTF8.self)
        }
    }

    /// The key a person typed: case, dashes and spaces do not matter.
    ///
    /// - Throws: ``KeychainError`` `.invalidParameter` unless it is 64 modhex characters.
    static func key(fromText text: String) throws(KeychainError) -> SecretBytes {
        try key(fromTyped: Array(text.utf8))
    }

    /// As ``key(fromText:)``, from the bytes as read (a terminal or a descriptor), so that the
    /// key need not pass through a String.
    static func key(fromTyped typed: [UInt8]) throws(KeychainError) -> SecretBytes {
        var digits: [UInt8] = []
        digits.reserveCapacity(typed.count)
        defer { for index in digits.indices { digits[index] = 0 } }
        for byte in typed
        where byte != UInt8(ascii: "-") && byte != UInt8(ascii: " ") && byte != UInt8(ascii: "\n")
            && byte != UInt8(ascii: "\r")
        {
            digits.append(byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte + 32 : byte)
        }
        guard digits.count == 64 else {
            throw KeychainError(
                .invalidParameter,
                "A recovery key is 64 letters (8 groups of 8, from cbdefghijklnrtuv); this has \(digits.count)")
        }
        guard digits.allSatisfy({ alphabet.contains($0) }) else {
            throw KeychainError(.invalidParameter, "A recovery key uses only the letters cbdefghijklnrtuv")
        }
        // Decoded straight into locked, zeroized memory.
        return SecretBytes(count: 32) { raw in
            for index in 0..<32 {
                let high = alphabet.firstIndex(of: digits[2 * index]) ?? 0
                let low = alphabet.firstIndex(of: digits[2 * index + 1]) ?? 0
                raw[index] = UInt8(high << 4 | low)
            }
        }
    }
}

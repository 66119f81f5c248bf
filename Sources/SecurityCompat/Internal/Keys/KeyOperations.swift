import Crypto
import CryptoExtras
import Foundation
import KeychainVocabulary
import TPMKeychain

/// SecKey's operations on each kind of key: swift-crypto for software keys, the TPM (through the
/// key's item, after its access control is satisfied) for TPM keys.
enum KeyOperations {
    // MARK: Signatures

    static func sign(_ material: KeyMaterial, _ algorithm: KeyAlgorithm, _ data: [UInt8]) throws(SecStatus) -> [UInt8] {
        switch (material, algorithm) {
        case (.ec(let curve, let privateKey?, _), .ecdsa(let hash, let message)):
            let digest = try digest(of: data, hash, message)
            return try crypto { try curve.sign(digest: digest, privateKey: privateKey) }
        case (.tpm(let item), .ecdsa(let hash, let message)):
            var digest = try digest(of: data, hash, message)
            // The TPM signs digests of its hash sizes; ECDSA uses the leftmost bits of a longer one.
            if ![32, 48, 64].contains(digest.count) {
                guard digest.count > 32 else {
                    throw SecStatus(errSecParam, "The TPM signs digests of 32, 48 or 64 bytes, not \(digest.count)")
                }
                digest = Array(digest.prefix(32))
            }
            let signed = digest
            let raw = try withTPMKey(item) { (items, result, key) throws(KeychainError) in
                try items.sign(digest: signed, with: result, key: key)
            }
            return try crypto { try EllipticCurve.derSignature(raw: raw) }
        case (.rsa(let privateKey?, _), .rsaPKCS1v15(let hash, let message)):
            return try rsaSign(privateKey, try digest(of: data, hash, message), hash, padding: .insecurePKCS1v1_5)
        case (.rsa(let privateKey?, _), .rsaPSS(let hash, let message)):
            return try rsaSign(privateKey, try digest(of: data, hash, message), hash, padding: .PSS)
        default:
            throw unsupported(algorithm, for: "signing with", material)
        }
    }

    static func verify(
        _ material: KeyMaterial, _ algorithm: KeyAlgorithm, _ data: [UInt8], _ signature: [UInt8]
    ) throws(SecStatus) -> Bool {
        switch (material.publicMaterial, algorithm) {
        case (.ec(let curve, _, let publicKey), .ecdsa(let hash, let message)):
            let digest = try digest(of: data, hash, message)
            return (try? curve.verify(signature: signature, digest: digest, publicKey: publicKey)) ?? false
        case (.rsa(_, let publicKey), .rsaPKCS1v15(let hash, let message)):
            return try rsaVerify(publicKey, try digest(of: data, hash, message), hash, signature, .insecurePKCS1v1_5)
        case (.rsa(_, let publicKey), .rsaPSS(let hash, let message)):
            return try rsaVerify(publicKey, try digest(of: data, hash, message), hash, signature, .PSS)
        default:
            throw unsupported(algorithm, for: "verifying with", material)
        }
    }

    private static func digest(
        of data: [UInt8], _ hash: KeyAlgorithm.Hash?, _ message: Bool
    ) throws(SecStatus) -> [UInt8] {
        guard let hash else { return data }
        if message { return hash.hash(data) }
        guard data.count == hash.byteCount else {
            throw SecStatus(
                errSecParam, "The digest has \(data.count) bytes; the algorithm's hash gives \(hash.byteCount)")
        }
        return data
    }

    private static func rsaSign(
        _ key: _RSA.Signing.PrivateKey, _ digest: [UInt8], _ hash: KeyAlgorithm.Hash, padding: _RSA.Signing.Padding
    ) throws(SecStatus) -> [UInt8] {
        try crypto {
            switch hash {
            case .sha256:
                Array(try key.signature(for: try typedDigest(digest, SHA256.self), padding: padding).rawRepresentation)
            case .sha384:
                Array(try key.signature(for: try typedDigest(digest, SHA384.self), padding: padding).rawRepresentation)
            case .sha512:
                Array(try key.signature(for: try typedDigest(digest, SHA512.self), padding: padding).rawRepresentation)
            }
        }
    }

    private static func rsaVerify(
        _ key: _RSA.Signing.PublicKey, _ digest: [UInt8], _ hash: KeyAlgorithm.Hash, _ signature: [UInt8],
        _ padding: _RSA.Signing.Padding
    ) throws(SecStatus) -> Bool {
        let signature = _RSA.Signing.RSASignature(rawRepresentation: signature)
        return try crypto {
            switch hash {
            case .sha256: key.isValidSignature(signature, for: try typedDigest(digest, SHA256.self), padding: padding)
            case .sha384: key.isValidSignature(signature, for: try typedDigest(digest, SHA384.self), padding: padding)
            case .sha512: key.isValidSignature(signature, for: try typedDigest(digest, SHA512.self), padding: padding)
            }
        }
    }

    /// A digest the caller computed, as swift-crypto's digest type of its hash: RSA's PKCS#1 v1.5
    /// names the hash from the type, and the types have no public initializer. Their layout is the
    /// digest's bytes (a tuple of words), which the size check confirms before the load.
    private static func typedDigest<H: HashFunction>(_ bytes: [UInt8], _: H.Type) throws -> H.Digest {
        guard bytes.count == H.Digest.byteCount, MemoryLayout<H.Digest>.size == bytes.count else {
            throw SecStatus(errSecParam, "The digest has \(bytes.count) bytes, not \(H.Digest.byteCount)")
        }
        return bytes.withUnsafeBytes { $0.loadUnaligned(as: H.Digest.self) }
    }

    // MARK: Key agreement

    /// SecKeyCreateSharedSecret: the x-coordinate of the shared point, or with `derived` the X9.63
    /// KDF (SHA-256) of it over `sharedInfo`, `requestedSize` bytes.
    static func sharedSecret(
        _ material: KeyMaterial, peer: KeyMaterial, derived: Bool, requestedSize: Int?, sharedInfo: [UInt8]
    ) throws(SecStatus) -> [UInt8] {
        guard case .ec(let peerCurve, _, let peerKey) = peer.publicMaterial else {
            throw SecStatus(errSecParam, "Key agreement needs an EC public key")
        }
        let derive = { (z: UnsafeRawBufferPointer) throws(SecStatus) -> [UInt8] in
            guard derived else { return Array(z) }
            guard let requestedSize, requestedSize > 0, requestedSize <= 1 << 16 else {
                throw SecStatus(
                    errSecParam, "The X9.63 variants need kSecKeyKeyExchangeParameterRequestedSize (1 to 65536)")
            }
            return X963KDF.derive(SHA256.self, z, sharedInfo: sharedInfo, count: requestedSize)
        }
        switch material {
        case .ec(let curve, let privateKey?, _) where curve == peerCurve:
            let z = try crypto { try curve.sharedSecret(privateKey: privateKey, peer: peerKey) }
            return try z.withUnsafeBytes { (z) throws(SecStatus) in try derive(z) }
        case .tpm(let item) where peerCurve == .p256:
            let z = try withTPMKey(item) { (items, result, key) throws(KeychainError) in
                try items.sharedSecret(with: peerKey, using: result, key: key)
            }
            return try z.withUnsafeBytes { (z) throws(SecStatus) in try derive(z) }
        default:
            throw SecStatus(errSecParam, "Key agreement needs a private EC key on the public key's curve")
        }
    }

    // MARK: Encryption

    static func encrypt(
        _ material: KeyMaterial, _ algorithm: KeyAlgorithm, _ plaintext: [UInt8]
    ) throws(SecStatus) -> [UInt8] {
        switch (material.publicMaterial, algorithm) {
        case (.ec(let curve, _, let publicKey), .ecies(let variableIV)):
            return try crypto { try ECIES.seal(plaintext, to: publicKey, curve: curve, variableIV: variableIV) }
        case (.rsa(_, let publicKey), .rsaOAEP):
            return try crypto {
                Array(
                    try _RSA.Encryption.PublicKey(derRepresentation: publicKey.pkcs1DERRepresentation).encrypt(
                        plaintext, padding: .PKCS1_OAEP_SHA256))
            }
        default:
            throw unsupported(algorithm, for: "encrypting with", material)
        }
    }

    static func decrypt(
        _ material: KeyMaterial, _ algorithm: KeyAlgorithm, _ ciphertext: [UInt8]
    ) throws(SecStatus) -> [UInt8] {
        switch (material, algorithm) {
        case (.ec(let curve, let privateKey?, _), .ecies(let variableIV)):
            return try crypto {
                try ECIES.open(ciphertext, curve: curve, variableIV: variableIV) { ephemeral in
                    try curve.sharedSecret(privateKey: privateKey, peer: ephemeral)
                }
            }
        case (.tpm(let item), .ecies(let variableIV)):
            return try crypto {
                try ECIES.open(ciphertext, curve: .p256, variableIV: variableIV) { ephemeral in
                    try withTPMKey(item) { (items, result, key) throws(KeychainError) in
                        try items.sharedSecret(with: ephemeral, using: result, key: key)
                    }
                }
            }
        case (.rsa(let privateKey?, _), .rsaOAEP):
            return try crypto {
                Array(
                    try _RSA.Encryption.PrivateKey(derRepresentation: privateKey.derRepresentation).decrypt(
                        ciphertext, padding: .PKCS1_OAEP_SHA256))
            }
        default:
            throw unsupported(algorithm, for: "decrypting with", material)
        }
    }

    // MARK: Support

    /// Runs `body` with the item of a TPM key, opened as its access control asks (the key's
    /// context, or one made for the call).
    static func withTPMKey<R>(
        _ item: TPMKeyItem,
        _ body: (ItemService, ItemQueryResult, ItemService.OpenedKey?) throws(KeychainError) -> R
    ) throws(SecStatus) -> R {
        let items = try SecItemOperations.mapped { () throws(KeychainError) in
            try ItemService(location: item.location, caller: SecItemOperations.caller)
        }
        guard
            let result = try SecItemOperations.mapped({ () throws(KeychainError) in
                try items.item(reference: item.reference)
            })
        else {
            throw SecStatus(errSecItemNotFound, "The key was deleted from the keychain")
        }
        var request = try SecItemRequest(NSDictionary())
        request.context = item.context
        request.prompt = item.prompt
        let key = try SecItemOperations.openedKey(for: result, request, items: items)
        do {
            return try body(items, result, key)
        } catch {
            let code = SecItemOperations.status(error.code)
            if code == errSecNotAvailable { KeychainEnvironment.recordUnavailable(error) }
            throw SecStatus(code, error.message)
        }
    }

    static func unsupported(_ algorithm: KeyAlgorithm, for what: String, _ material: KeyMaterial) -> SecStatus {
        SecStatus(errSecParam, "The algorithm does not apply to \(what) this key")
    }

    /// swift-crypto's errors (and SecStatus thrown inside) as a SecStatus.
    static func crypto<R>(_ body: () throws -> R) throws(SecStatus) -> R {
        do {
            return try body()
        } catch let status as SecStatus {
            throw status
        } catch {
            throw SecStatus(errSecParam, "The operation failed: \(error)")
        }
    }
}

/// Apple's ECIES (SecKeyAlgorithm eciesEncryption…X963SHA256AESGCM): an ephemeral key on the
/// recipient's curve; Z = ECDH(ephemeral, recipient); the X9.63 KDF (SHA-256) of Z with the
/// ephemeral public key (X9.63) as shared info gives the AES key (16 bytes on P-256, 32 on
/// P-384 and P-521) and, in the variable-IV variants, a 16-byte IV after it (else 16 zero bytes);
/// AES-GCM without additional data. Output: ephemeral public key ‖ ciphertext ‖ 16-byte tag.
enum ECIES {
    static func keySize(_ curve: EllipticCurve) -> Int { curve == .p256 ? 16 : 32 }

    static func seal(
        _ plaintext: [UInt8], to recipient: [UInt8], curve: EllipticCurve, variableIV: Bool
    ) throws -> [UInt8] {
        try curve.validatePublic(recipient)
        let ephemeral = curve.generate()
        let ephemeralPublic = try curve.publicKey(ofPrivate: ephemeral)
        let z = try curve.sharedSecret(privateKey: ephemeral, peer: recipient)
        let (key, iv) = z.withUnsafeBytes { derive($0, ephemeralPublic: ephemeralPublic, curve, variableIV) }
        let box = try AES.GCM.seal(plaintext, using: key, nonce: try AES.GCM.Nonce(data: iv))
        return ephemeralPublic + box.ciphertext + box.tag
    }

    /// Opens what ``seal(_:to:curve:variableIV:)`` made; `agree` gives Z for the ephemeral public key.
    static func open(
        _ data: [UInt8], curve: EllipticCurve, variableIV: Bool, agree: ([UInt8]) throws -> SecretBytes
    ) throws -> [UInt8] {
        guard data.count >= curve.publicKeyBytes + 16 else {
            throw SecStatus(errSecParam, "The ciphertext is too short for ECIES on this curve")
        }
        let ephemeralPublic = Array(data.prefix(curve.publicKeyBytes))
        try curve.validatePublic(ephemeralPublic)
        let z = try agree(ephemeralPublic)
        let (key, iv) = z.withUnsafeBytes { derive($0, ephemeralPublic: ephemeralPublic, curve, variableIV) }
        let body = data[curve.publicKeyBytes..<(data.count - 16)]
        let box = try AES.GCM.SealedBox(nonce: try AES.GCM.Nonce(data: iv), ciphertext: body, tag: data.suffix(16))
        do {
            return Array(try AES.GCM.open(box, using: key))
        } catch {
            throw SecStatus(errSecDecode, "The ciphertext is not authentic (wrong key, or changed)")
        }
    }

    private static func derive(
        _ z: UnsafeRawBufferPointer, ephemeralPublic: [UInt8], _ curve: EllipticCurve, _ variableIV: Bool
    ) -> (SymmetricKey, [UInt8]) {
        let size = keySize(curve)
        let output = X963KDF.derive(SHA256.self, z, sharedInfo: ephemeralPublic, count: size + (variableIV ? 16 : 0))
        let iv = variableIV ? Array(output.suffix(16)) : [UInt8](repeating: 0, count: 16)
        return (SymmetricKey(data: output.prefix(size)), iv)
    }
}

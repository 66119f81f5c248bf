import Crypto

/// A SecKeyAlgorithm, parsed: what the operation does and with which hash.
enum KeyAlgorithm: Hashable {
    enum Hash: Hashable {
        case sha256, sha384, sha512

        var byteCount: Int {
            switch self {
            case .sha256: 32
            case .sha384: 48
            case .sha512: 64
            }
        }

        func hash(_ data: [UInt8]) -> [UInt8] {
            switch self {
            case .sha256: Array(SHA256.hash(data: data))
            case .sha384: Array(SHA384.hash(data: data))
            case .sha512: Array(SHA512.hash(data: data))
            }
        }
    }

    /// ECDSA, X9.62 DER signatures; `hash` nil for a digest of any size (digest-X962).
    case ecdsa(hash: Hash?, message: Bool)
    case rsaPKCS1v15(hash: Hash, message: Bool)
    case rsaPSS(hash: Hash, message: Bool)
    case rsaOAEP(hash: Hash)
    /// Apple's ECIES: ECDH with an ephemeral key, the X9.63 KDF over SHA-256, AES-GCM; the IV
    /// from the KDF (`variableIV`) or 16 zero bytes (the older variants).
    case ecies(variableIV: Bool)
    /// ECDH; with the X9.63 KDF over SHA-256 when `derived`.
    case ecdh(derived: Bool)

    init?(_ algorithm: SecKeyAlgorithm) {
        let hashes: [String: Hash] = ["SHA256": .sha256, "SHA384": .sha384, "SHA512": .sha512]
        switch algorithm.rawValue as String {
        case "algid:sign:ECDSA:digest-X962": self = .ecdsa(hash: nil, message: false)
        case "algid:encrypt:RSA:OAEP:SHA256": self = .rsaOAEP(hash: .sha256)
        case "algid:encrypt:ECIES:ECDH:KDFX963:SHA256:AESGCM", "algid:encrypt:ECIES:ECDHC:KDFX963:SHA256:AESGCM":
            self = .ecies(variableIV: false)
        case "algid:encrypt:ECIES:ECDH:KDFX963:SHA256:AESGCM-KDFIV",
            "algid:encrypt:ECIES:ECDHC:KDFX963:SHA256:AESGCM-KDFIV":
            self = .ecies(variableIV: true)
        case "algid:keyexchange:ECDH", "algid:keyexchange:ECDHC": self = .ecdh(derived: false)
        case "algid:keyexchange:ECDH:KDFX963:SHA256", "algid:keyexchange:ECDHC:KDFX963:SHA256":
            self = .ecdh(derived: true)
        case let text:
            let parts = text.split(separator: ":").map(String.init)
            guard parts.count >= 5, parts[0] == "algid", parts[1] == "sign", let hash = hashes[parts[4]] else {
                return nil
            }
            switch (parts[2], parts[3], parts.count) {
            case ("ECDSA", "digest-X962", 5): self = .ecdsa(hash: hash, message: false)
            case ("ECDSA", "message-X962", 5): self = .ecdsa(hash: hash, message: true)
            case ("RSA", "digest-PKCS1v15", 5): self = .rsaPKCS1v15(hash: hash, message: false)
            case ("RSA", "message-PKCS1v15", 5): self = .rsaPKCS1v15(hash: hash, message: true)
            // PSS names its hash, its MGF1 hash and its salt length, all the digest's.
            case ("RSA", "digest-PSS", 7) where parts[5] == parts[4] && parts[6] == String(hash.byteCount):
                self = .rsaPSS(hash: hash, message: false)
            case ("RSA", "message-PSS", 7) where parts[5] == parts[4] && parts[6] == String(hash.byteCount):
                self = .rsaPSS(hash: hash, message: true)
            default: return nil
            }
        }
    }

    /// The operations a key of `material`'s kind does with this algorithm.
    func supports(_ operation: SecKeyOperationType, _ material: KeyMaterial) -> Bool {
        let isEC: Bool
        switch material {
        case .ec, .tpm: isEC = true
        case .rsa: isEC = false
        }
        let isPrivate = material.isPrivate
        switch self {
        case .ecdsa:
            return isEC && (operation == .sign ? isPrivate : operation == .verify)
        case .rsaPKCS1v15, .rsaPSS:
            return !isEC && (operation == .sign ? isPrivate : operation == .verify)
        case .rsaOAEP:
            return !isEC && (operation == .decrypt ? isPrivate : operation == .encrypt)
        case .ecies:
            return isEC && (operation == .decrypt ? isPrivate : operation == .encrypt)
        case .ecdh:
            return isEC && isPrivate && operation == .keyExchange
        }
    }
}

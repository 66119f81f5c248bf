// swift-format-ignore-file: AlwaysUseLowerCamelCase
// Apple's names, kept as Apple spells them so that ported code compiles unchanged.

import TPMKeychain

/// A key, as Apple's SecKey: a software key (EC P-256/384/521 or RSA 2048 to 4096, over
/// swift-crypto), or a P-256 private key that lives in the TPM (kSecAttrTokenIDSecureEnclave),
/// which signs and agrees on keys there and is never exported.
public final class SecKey: Hashable, Sendable {
    let material: KeyMaterial

    init(_ material: KeyMaterial) { self.material = material }

    /// Equal keys have the same class and public key, as CFEqual compares SecKeys.
    public static func == (lhs: SecKey, rhs: SecKey) -> Bool {
        lhs.material.isPrivate == rhs.material.isPrivate && lhs.material.publicKeyBytes == rhs.material.publicKeyBytes
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(material.isPrivate)
        hasher.combine(material.publicKeyBytes)
    }
}

/// Makes a key pair and returns its private key, as Apple's SecKeyCreateRandomKey.
///
/// - kSecAttrKeyType EC (kSecAttrKeyTypeECSECPrimeRandom) with kSecAttrKeySizeInBits 256, 384
///   or 521, or RSA with 2048 to 4096 (a multiple of 8).
/// - kSecAttrTokenID kSecAttrTokenIDSecureEnclave: a P-256 key made in the TPM under the store's
///   storage key; kSecAttrAccessControl (under kSecPrivateKeyAttrs or at the top) becomes the
///   key item's protection and, in the TPM, the key's own policy. Such a key needs
///   kSecAttrIsPermanent (the keychain keeps what authorizes its use).
/// - kSecAttrIsPermanent true stores the private key as a key item (kSecClassKey) with
///   kSecAttrApplicationTag, kSecAttrLabel and kSecAttrAccessGroup, and kSecAttrApplicationLabel
///   (the SHA-1 of the public key, unless given).
///
/// - Returns: nil, with an error (NSOSStatusErrorDomain) in `error`, for what Apple refuses
///   (errSecParam), a duplicate (errSecDuplicateItem), or no TPM (errSecNotAvailable).
public func SecKeyCreateRandomKey(
    _ parameters: CFDictionary, _ error: UnsafeMutablePointer<Unmanaged<CFError>?>?
) -> SecKey? {
    SecKeyCall.run(error) { () throws(SecStatus) in try KeyItems.createRandomKey(parameters) }
}

/// The public key of a key pair (nil for a key without one).
public func SecKeyCopyPublicKey(_ key: SecKey) -> SecKey? {
    SecKey(key.material.publicMaterial)
}

/// The key's external representation: X9.63 for EC (0x04 ‖ X ‖ Y, then K for a private key),
/// PKCS#1 DER for RSA. A TPM key's private part never leaves the TPM: nil, with
/// errSecUnimplemented, as Apple's Secure Enclave keys answer.
public func SecKeyCopyExternalRepresentation(
    _ key: SecKey, _ error: UnsafeMutablePointer<Unmanaged<CFError>?>?
) -> CFData? {
    SecKeyCall.run(error) { () throws(SecStatus) in
        guard let bytes = key.material.externalRepresentation else {
            throw SecStatus(errSecUnimplemented, "export not implemented for key: the private key lives in the TPM")
        }
        return NSData(bytes: bytes, length: bytes.count)
    }
}

/// A software key from its external representation (kSecAttrKeyType and kSecAttrKeyClass in
/// `attributes`), as Apple's SecKeyCreateWithData.
public func SecKeyCreateWithData(
    _ keyData: CFData, _ attributes: CFDictionary, _ error: UnsafeMutablePointer<Unmanaged<CFError>?>?
) -> SecKey? {
    SecKeyCall.run(error) { () throws(SecStatus) in
        let parameters = KeyParameters(attributes)
        guard let type = parameters.string("type"), let keyClass = parameters.string("kcls"), keyClass != "2" else {
            throw SecStatus(errSecParam, "kSecAttrKeyType and kSecAttrKeyClass (public or private) are required")
        }
        let material = try KeyMaterial.decode(
            Array(Data(referencing: keyData)), type: type, isPrivate: keyClass == "1")
        if let bits = parameters.int("bsiz"), bits != material.bits {
            throw SecStatus(errSecParam, "The key has \(material.bits) bits, not \(bits)")
        }
        return SecKey(material)
    }
}

/// The key's attributes: kcls, type, bsiz, esiz, klbl, the abilities (sign, vrfy, decr, encr,
/// drve), tkid for a TPM key, and v_Data with the external representation where there is one.
public func SecKeyCopyAttributes(_ key: SecKey) -> CFDictionary? {
    NSDictionary(dictionary: KeyItems.attributes(of: key.material))
}

/// Whether the key does `operation` with `algorithm`.
public func SecKeyIsAlgorithmSupported(
    _ key: SecKey, _ operation: SecKeyOperationType, _ algorithm: SecKeyAlgorithm
) -> Bool {
    guard let parsed = KeyAlgorithm(algorithm) else { return false }
    return parsed.supports(operation, key.material)
}

/// The block size in bytes: the RSA modulus, or for EC the signature's largest DER size.
public func SecKeyGetBlockSize(_ key: SecKey) -> Int {
    switch key.material {
    case .rsa(_, let publicKey): publicKey.keySizeInBits / 8
    case .ec(let curve, _, _): 2 * curve.coordinateBytes + 9
    case .tpm: 73
    }
}

/// Signs `dataToSign` (a message or a digest, as the algorithm says): ECDSA in X9.62 DER, RSA
/// PKCS#1 v1.5 or PSS. A TPM key signs in the TPM, after its access control is satisfied.
public func SecKeyCreateSignature(
    _ key: SecKey, _ algorithm: SecKeyAlgorithm, _ dataToSign: CFData,
    _ error: UnsafeMutablePointer<Unmanaged<CFError>?>?
) -> CFData? {
    SecKeyCall.run(error) { () throws(SecStatus) in
        let parsed = try KeyItems.algorithm(algorithm, .sign, key)
        let signature = try KeyOperations.sign(key.material, parsed, Array(Data(referencing: dataToSign)))
        return NSData(bytes: signature, length: signature.count)
    }
}

/// Whether `signature` is the key's (or its public key's) signature of `signedData`; false with
/// errSecVerifyFailed in `error` when it is not.
public func SecKeyVerifySignature(
    _ key: SecKey, _ algorithm: SecKeyAlgorithm, _ signedData: CFData, _ signature: CFData,
    _ error: UnsafeMutablePointer<Unmanaged<CFError>?>?
) -> Bool {
    let verified = SecKeyCall.run(error) { () throws(SecStatus) -> NSNumber in
        let parsed = try KeyItems.algorithm(algorithm, .verify, key)
        guard
            try KeyOperations.verify(
                key.material, parsed, Array(Data(referencing: signedData)), Array(Data(referencing: signature)))
        else {
            throw SecStatus(errSecVerifyFailed, "The signature does not match the data and the key")
        }
        return NSNumber(value: true)
    }
    return verified != nil
}

/// ECDH between `privateKey` and `publicKey`: the shared x-coordinate, or with the X9.63
/// variants kSecKeyKeyExchangeParameterRequestedSize bytes derived over
/// kSecKeyKeyExchangeParameterSharedInfo. A TPM key computes the shared point in the TPM.
public func SecKeyCopyKeyExchangeResult(
    _ privateKey: SecKey, _ algorithm: SecKeyAlgorithm, _ publicKey: SecKey, _ parameters: CFDictionary,
    _ error: UnsafeMutablePointer<Unmanaged<CFError>?>?
) -> CFData? {
    SecKeyCall.run(error) { () throws(SecStatus) in
        guard case .ecdh(let derived) = try KeyItems.algorithm(algorithm, .keyExchange, privateKey) else {
            throw SecStatus(errSecParam, "Not a key-exchange algorithm")
        }
        let options = KeyParameters(parameters)
        let secret = try KeyOperations.sharedSecret(
            privateKey.material, peer: publicKey.material, derived: derived,
            requestedSize: options.int("requestedSize"),
            sharedInfo: options.data("sharedInfo") ?? [])
        return NSData(bytes: secret, length: secret.count)
    }
}

/// Encrypts to the key (or its public key): ECIES or RSA OAEP SHA-256.
public func SecKeyCreateEncryptedData(
    _ key: SecKey, _ algorithm: SecKeyAlgorithm, _ plaintext: CFData,
    _ error: UnsafeMutablePointer<Unmanaged<CFError>?>?
) -> CFData? {
    SecKeyCall.run(error) { () throws(SecStatus) in
        let parsed = try KeyItems.algorithm(algorithm, .encrypt, SecKey(key.material.publicMaterial))
        let sealed = try KeyOperations.encrypt(key.material, parsed, Array(Data(referencing: plaintext)))
        return NSData(bytes: sealed, length: sealed.count)
    }
}

/// Decrypts with the private key: ECIES (a TPM key computes its part in the TPM) or RSA OAEP
/// SHA-256; errSecDecode for a ciphertext that is not authentic.
public func SecKeyCreateDecryptedData(
    _ key: SecKey, _ algorithm: SecKeyAlgorithm, _ ciphertext: CFData,
    _ error: UnsafeMutablePointer<Unmanaged<CFError>?>?
) -> CFData? {
    SecKeyCall.run(error) { () throws(SecStatus) in
        let parsed = try KeyItems.algorithm(algorithm, .decrypt, key)
        let opened = try KeyOperations.decrypt(key.material, parsed, Array(Data(referencing: ciphertext)))
        return NSData(bytes: opened, length: opened.count)
    }
}

enum SecKeyCall {
    /// Runs a SecKey function's body: its result, or nil with the error as a retained CFError in
    /// NSOSStatusErrorDomain (code: the OSStatus), as Apple's functions report.
    static func run<R>(
        _ error: UnsafeMutablePointer<Unmanaged<CFError>?>?, _ body: () throws(SecStatus) -> R
    ) -> R? {
        error?.pointee = nil
        do {
            return try body()
        } catch {
            let message = error.message ?? SecCopyErrorMessageString(error.status, nil).map { $0 as String } ?? ""
            let nsError = NSError(
                domain: NSOSStatusErrorDomain, code: Int(error.status),
                userInfo: [NSLocalizedDescriptionKey: message])
            errorPointer(error: nsError)
            return nil
        }

        func errorPointer(error nsError: NSError) {
            error?.pointee = Unmanaged.passRetained(nsError)
        }
    }
}

public import Crypto
public import Foundation
public import LocalAuthenticationCompat
public import SecurityCompat
import TPM
import TPMKeychain

/// What CryptoKit's `SecureEnclave` gives Apple platforms, on the TPM: P-256 keys made inside the
/// TPM, used there (signatures, key agreement), never exported, gated by an access control as
/// keychain items are. swift-crypto's types are at the edges, so code written for CryptoKit ports
/// by importing `Crypto` and `SecureEnclaveCompat` instead of `CryptoKit`.
///
/// Where this differs from Apple's (docs/PORTING.md, "Keys in the TPM"):
/// - A key lives in the keychain (a kSecClassKey item): its `dataRepresentation` names that item
///   on this machine's store, so the key goes away with the item (`SecItemDelete`), not when the
///   application forgets the data. The item holds what authorizes the key's use, which is how
///   its access control is enforced at every use.
/// - `sharedSecretFromKeyAgreement(with:)` returns ``SecureEnclave/SharedSecret``, which derives
///   keys as swift-crypto's `SharedSecret` does: swift-crypto's type cannot be made outside it.
public enum SecureEnclave {
    /// Whether a TPM can be used: a hardware TPM this user may open, `TPM_KEYCHAIN_TCTI`, or the
    /// store's configured TPM (``KeychainEnvironment/location``).
    public static var isAvailable: Bool {
        let location = KeychainEnvironment.location
        switch location.tpm {
        case .tcti, .chosen: return true
        case .automatic, .automaticOrSimulated: break
        }
        return TPMConfiguration.environmentTCTI != nil || TPMConfiguration.hardwareTPMIsUsable
            || location.tpm == .automaticOrSimulated
    }

    public enum P256 {
        public enum Signing {
            /// A P-256 signing key in the TPM.
            public struct PrivateKey: Sendable {
                let key: EnclaveKey

                /// Makes a key in the TPM, its use gated by `accessControl` (default: the device
                /// unlocked, this device only, as CryptoKit's default).
                public init(
                    compactRepresentable: Bool = true,
                    accessControl: SecAccessControl = EnclaveKey.defaultAccessControl,
                    authenticationContext: LAContext? = nil
                ) throws {
                    key = try EnclaveKey(accessControl: accessControl, context: authenticationContext)
                    publicKey = try Crypto.P256.Signing.PublicKey(x963Representation: key.publicKey)
                }

                /// The key a ``dataRepresentation`` names.
                public init(dataRepresentation: Data, authenticationContext: LAContext? = nil) throws {
                    key = try EnclaveKey(dataRepresentation: dataRepresentation, context: authenticationContext)
                    publicKey = try Crypto.P256.Signing.PublicKey(x963Representation: key.publicKey)
                }

                /// Names the key (its keychain item on this machine); no key material.
                public var dataRepresentation: Data { key.dataRepresentation }

                public let publicKey: Crypto.P256.Signing.PublicKey

                /// An ECDSA signature of SHA-256(`data`), made in the TPM.
                public func signature<D: DataProtocol>(for data: D) throws -> Crypto.P256.Signing.ECDSASignature {
                    try signature(for: SHA256.hash(data: data))
                }

                /// An ECDSA signature of `digest`, made in the TPM.
                public func signature<D: Digest>(for digest: D) throws -> Crypto.P256.Signing.ECDSASignature {
                    let der = try key.sign(digest: Array(digest))
                    return try Crypto.P256.Signing.ECDSASignature(derRepresentation: der)
                }
            }
        }

        public enum KeyAgreement {
            /// A P-256 key-agreement key in the TPM.
            public struct PrivateKey: Sendable {
                let key: EnclaveKey

                public init(
                    compactRepresentable: Bool = true,
                    accessControl: SecAccessControl = EnclaveKey.defaultAccessControl,
                    authenticationContext: LAContext? = nil
                ) throws {
                    key = try EnclaveKey(accessControl: accessControl, context: authenticationContext)
                    publicKey = try Crypto.P256.KeyAgreement.PublicKey(x963Representation: key.publicKey)
                }

                public init(dataRepresentation: Data, authenticationContext: LAContext? = nil) throws {
                    key = try EnclaveKey(dataRepresentation: dataRepresentation, context: authenticationContext)
                    publicKey = try Crypto.P256.KeyAgreement.PublicKey(x963Representation: key.publicKey)
                }

                public var dataRepresentation: Data { key.dataRepresentation }

                public let publicKey: Crypto.P256.KeyAgreement.PublicKey

                /// ECDH with `publicKeyShare`, computed in the TPM.
                public func sharedSecretFromKeyAgreement(
                    with publicKeyShare: Crypto.P256.KeyAgreement.PublicKey
                ) throws -> SecureEnclave.SharedSecret {
                    SharedSecret(bytes: try key.sharedSecret(with: Array(publicKeyShare.x963Representation)))
                }
            }
        }
    }

    /// A key agreement's shared secret, with swift-crypto's `SharedSecret` derivations.
    public struct SharedSecret: Sendable, Hashable, CustomStringConvertible {
        let bytes: SecretBytes

        public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
            try bytes.withUnsafeBytes { buffer in try body(buffer) }
        }

        /// HKDF (RFC 5869) of the secret, as swift-crypto's `hkdfDerivedSymmetricKey`.
        public func hkdfDerivedSymmetricKey<H: HashFunction, Salt: DataProtocol, Info: DataProtocol>(
            using hashFunction: H.Type, salt: Salt, sharedInfo: Info, outputByteCount: Int
        ) -> SymmetricKey {
            HKDF<H>.deriveKey(
                inputKeyMaterial: SymmetricKey(data: bytes.withUnsafeBytes { Data($0) }), salt: salt, info: sharedInfo,
                outputByteCount: outputByteCount)
        }

        /// ANSI X9.63's KDF of the secret, as swift-crypto's `x963DerivedSymmetricKey`.
        public func x963DerivedSymmetricKey<H: HashFunction, Info: DataProtocol>(
            using hashFunction: H.Type, sharedInfo: Info, outputByteCount: Int
        ) -> SymmetricKey {
            var output: [UInt8] = []
            var counter: UInt32 = 1
            while output.count < outputByteCount {
                var hash = H()
                bytes.withUnsafeBytes { hash.update(bufferPointer: $0) }
                Swift.withUnsafeBytes(of: counter.bigEndian) { hash.update(bufferPointer: $0) }
                hash.update(data: Data(sharedInfo))
                output += hash.finalize()
                counter += 1
            }
            return SymmetricKey(data: output.prefix(outputByteCount))
        }

        public static func == (lhs: Self, rhs: Self) -> Bool { lhs.bytes == rhs.bytes }
        public func hash(into hasher: inout Hasher) { hasher.combine(bytes.count) }
        public var description: String { "SharedSecret(\(bytes.count) bytes)" }
    }
}

/// The key behind both faces: a SecKey in the TPM (kSecAttrTokenIDSecureEnclave), made and
/// found through SecurityCompat.
public struct EnclaveKey: @unchecked Sendable {
    // SecKey and LAContext are thread-safe; the fields are immutable.
    let secKey: SecKey
    let publicKey: [UInt8]
    let reference: Data

    /// CryptoKit's default: usable while the device is unlocked, on this device only.
    public static var defaultAccessControl: SecAccessControl {
        SecAccessControlCreateWithFlags(nil, kSecAttrAccessibleWhenUnlockedThisDeviceOnly, .privateKeyUsage, nil)!
    }

    static let magic = Data("TKSE".utf8)

    init(accessControl: SecAccessControl, context: LAContext?) throws {
        var parameters: [String: Any] = [
            kSecAttrKeyType as String: kSecAttrKeyTypeECSECPrimeRandom,
            kSecAttrKeySizeInBits as String: 256,
            kSecAttrTokenID as String: kSecAttrTokenIDSecureEnclave,
            kSecPrivateKeyAttrs as String: [
                kSecAttrIsPermanent as String: true,
                kSecAttrAccessControl as String: accessControl,
                kSecAttrApplicationTag as String: Data("SecureEnclaveCompat".utf8),
            ] as [String: Any],
        ]
        if let context { parameters[kSecUseAuthenticationContext as String] = context }
        var error: Unmanaged<CFError>?
        guard let key = SecKeyCreateRandomKey(parameters as CFDictionary, &error) else {
            throw error!.takeRetainedValue() as any Error
        }
        let publicKey = try Self.publicKey(of: key)
        let query: [String: Any] = [
            kSecClass as String: kSecClassKey, kSecAttrTokenID as String: kSecAttrTokenIDSecureEnclave,
            kSecAttrApplicationLabel as String: Data(Insecure.SHA1.hash(data: publicKey)),
            kSecReturnPersistentRef as String: true,
        ]
        var found: AnyObject?
        let status = SecItemCopyMatching(query as CFDictionary, &found)
        guard status == errSecSuccess, let reference = found as? Data ?? (found as? NSData).map({ Data($0) }) else {
            throw NSError(domain: NSOSStatusErrorDomain, code: Int(status))
        }
        self.init(secKey: key, publicKey: publicKey, reference: reference)
    }

    init(dataRepresentation: Data, context: LAContext?) throws {
        guard dataRepresentation.count > Self.magic.count, dataRepresentation.prefix(4) == Self.magic else {
            throw NSError(
                domain: NSOSStatusErrorDomain, code: Int(errSecParam),
                userInfo: [NSLocalizedDescriptionKey: "Not a TPM key's data representation"])
        }
        let reference = dataRepresentation.dropFirst(4)
        var query: [String: Any] = [
            kSecClass as String: kSecClassKey, kSecValuePersistentRef as String: Data(reference),
            kSecReturnRef as String: true,
        ]
        if let context { query[kSecUseAuthenticationContext as String] = context }
        var found: AnyObject?
        let status = SecItemCopyMatching(query as CFDictionary, &found)
        guard status == errSecSuccess, let key = found as? SecKey else {
            throw NSError(
                domain: NSOSStatusErrorDomain, code: Int(status),
                userInfo: [
                    NSLocalizedDescriptionKey:
                        "The key is not in this machine's keychain (deleted, or made on another machine)"
                ])
        }
        self.init(secKey: key, publicKey: try Self.publicKey(of: key), reference: Data(reference))
    }

    private init(secKey: SecKey, publicKey: [UInt8], reference: Data) {
        self.secKey = secKey
        self.publicKey = publicKey
        self.reference = reference
    }

    var dataRepresentation: Data { Self.magic + reference }

    func sign(digest: [UInt8]) throws -> [UInt8] {
        var error: Unmanaged<CFError>?
        guard
            let signature = SecKeyCreateSignature(
                secKey, .ecdsaSignatureDigestX962, NSData(bytes: digest, length: digest.count), &error)
        else {
            throw error!.takeRetainedValue() as any Error
        }
        return Array(Data(referencing: signature))
    }

    func sharedSecret(with peer: [UInt8]) throws -> SecretBytes {
        var error: Unmanaged<CFError>?
        guard
            let peerKey = SecKeyCreateWithData(
                NSData(bytes: peer, length: peer.count),
                [
                    kSecAttrKeyType as String: kSecAttrKeyTypeECSECPrimeRandom,
                    kSecAttrKeyClass as String: kSecAttrKeyClassPublic,
                ]
                    as CFDictionary, &error)
        else {
            throw error!.takeRetainedValue() as any Error
        }
        guard
            let secret = SecKeyCopyKeyExchangeResult(
                secKey, .ecdhKeyExchangeStandard, peerKey, NSDictionary(), &error)
        else {
            throw error!.takeRetainedValue() as any Error
        }
        return SecretBytes(copying: Array(Data(referencing: secret)))
    }

    private static func publicKey(of key: SecKey) throws -> [UInt8] {
        var error: Unmanaged<CFError>?
        guard let publicKey = SecKeyCopyPublicKey(key),
            let bytes = SecKeyCopyExternalRepresentation(publicKey, &error)
        else {
            throw error?.takeRetainedValue() as (any Error)?
                ?? NSError(domain: NSOSStatusErrorDomain, code: Int(errSecParam))
        }
        return Array(Data(referencing: bytes))
    }
}

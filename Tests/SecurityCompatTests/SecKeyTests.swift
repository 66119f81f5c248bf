import Crypto
import Foundation
import LocalAuthenticationCompat
import SecurityCompat
import TPMKeychain
import TPMKeychainTesting
import Testing
import WireFormat

/// SecKey over SecurityCompat: keys in the TPM (kSecAttrTokenIDSecureEnclave) and in software,
/// Apple's documented code run unchanged, results checked with swift-crypto, `openssl` and
/// known-answer vectors (Fixtures/keys/vectors.json, from Fixtures/keys/make-vectors.py).
/// In SecItemTests' serialized suite: SecItem's configuration is process-wide.
extension SecItemTests {
    @Test(
        "Apple's Secure Enclave example: a TPM key is made, found by its tag, signs (verified by swift-crypto and openssl), decrypts ECIES, never exports, and is deleted"
    )
    func secureEnclaveExample() throws {
        let environment = try CompatEnvironment()
        let privateKey = try AppleKeyExamples.makeAndStoreKey(name: "com.example.keys.device")
        let publicKey = try #require(SecKeyCopyPublicKey(privateKey))
        let message = Data("a message the TPM signs".utf8)

        let found = try #require(AppleKeyExamples.loadKey(name: "com.example.keys.device"))
        #expect(found == privateKey)
        let signature = try AppleKeyExamples.sign(message, with: found)
        #expect(AppleKeyExamples.verify(signature, of: message, with: publicKey))
        #expect(!AppleKeyExamples.verify(signature, of: Data("another message".utf8), with: publicKey))

        // Independent checks: swift-crypto, and openssl on the PEM public key.
        let exported = try externalRepresentation(publicKey)
        let cryptoKey = try P256.Signing.PublicKey(x963Representation: exported)
        #expect(cryptoKey.isValidSignature(try P256.Signing.ECDSASignature(derRepresentation: signature), for: message))
        #expect(try OpenSSL.verifies(signature: signature, of: message, publicKeyPEM: cryptoKey.pemRepresentation))

        // ECIES to the TPM key, and back through the TPM.
        let secret = Data("for the device only".utf8)
        let sealed = try AppleKeyExamples.encrypt(secret, to: publicKey)
        #expect(try AppleKeyExamples.decrypt(sealed, with: found) == secret)

        // The private key never leaves: Apple's answer for an enclave key.
        var error: Unmanaged<CFError>?
        #expect(SecKeyCopyExternalRepresentation(privateKey, &error) == nil)
        #expect(error?.takeRetainedValue().code == Int(errSecUnimplemented))
        let attributes = try #require(SecKeyCopyAttributes(privateKey) as? [String: Any])
        #expect(attributes[kSecAttrTokenID as String] as? String == kSecAttrTokenIDSecureEnclave as String)
        #expect(attributes[kSecAttrKeySizeInBits as String] as? Int == 256)
        #expect(attributes[kSecAttrApplicationLabel as String] as? Data == Data(Insecure.SHA1.hash(data: exported)))

        // Deleting the item destroys the key: the reference no longer signs.
        #expect(AppleKeyExamples.deleteKey(name: "com.example.keys.device") == errSecSuccess)
        #expect(AppleKeyExamples.loadKey(name: "com.example.keys.device") == nil)
        error = nil
        #expect(SecKeyCreateSignature(found, .ecdsaSignatureMessageX962SHA256, message as CFData, &error) == nil)
        #expect(error?.takeRetainedValue().code == Int(errSecItemNotFound))
        _ = environment
    }

    @Test(
        "A biometryCurrentSet TPM key asks for biometry, and after an enrollment change the TPM itself refuses the key, even to a context that kept its item open"
    )
    func biometryCurrentSetKeyIsRefusedByTheTPM() throws {
        let environment = try CompatEnvironment()
        let context = LAContext()
        context.touchIDAuthenticationAllowableReuseDuration = 300
        _ = try AppleKeyExamples.makeAndStoreKey(name: "com.example.keys.bio", requiresBiometry: true)
        let key = try #require(AppleKeyExamples.loadKey(name: "com.example.keys.bio", context: context))
        #expect(environment.face.attempts == 0) // a reference asks nobody
        let message = Data("sign me".utf8)
        _ = try AppleKeyExamples.sign(message, with: key)
        #expect(environment.face.attempts == 1)
        _ = try AppleKeyExamples.sign(message, with: key)
        #expect(environment.face.attempts == 1) // within the context's reuse window

        // Someone enrolls another face; the next biometryCurrentSet write moves the TPM's counter.
        environment.face.reenroll()
        let item: [String: Any] = [
            kSecClass as String: kSecClassGenericPassword, kSecAttrService as String: "after",
            kSecAttrAccount as String: "x",
            kSecValueData as String: Data("v".utf8),
            kSecAttrAccessControl as String: SecAccessControlCreateWithFlags(
                nil, kSecAttrAccessibleWhenUnlockedThisDeviceOnly, .biometryCurrentSet, nil)!,
        ]
        #expect(SecItemAdd(item as CFDictionary, nil) == errSecSuccess)

        // The context still holds the item's key (no prompt): only the key's TPM policy can refuse.
        var error: Unmanaged<CFError>?
        #expect(SecKeyCreateSignature(key, .ecdsaSignatureMessageX962SHA256, message as CFData, &error) == nil)
        let failure = error?.takeRetainedValue()
        #expect(failure?.code == Int(errSecItemNotFound), "\(String(describing: failure))")
        let description = failure.map { $0.localizedDescription } ?? ""
        #expect(description.contains("enrollment changed"), "\(description)")
        #expect(environment.face.attempts == 1)
    }

    @Test(
        "Software keys: EC P-256/384/521 and RSA 2048 sign and verify (openssl agrees), RSA OAEP and ECIES round-trip, external representations round-trip"
    )
    func softwareKeys() throws {
        let environment = try CompatEnvironment()
        let message = Data("software".utf8)
        for bits in [256, 384, 521] {
            let key = try randomKey(type: kSecAttrKeyTypeECSECPrimeRandom, bits: bits)
            let publicKey = try #require(SecKeyCopyPublicKey(key))
            for algorithm: SecKeyAlgorithm in [
                .ecdsaSignatureMessageX962SHA256, .ecdsaSignatureMessageX962SHA384, .ecdsaSignatureMessageX962SHA512,
            ] {
                let signature = try sign(key, algorithm, message)
                #expect(try verify(publicKey, algorithm, message, signature), "P-\(bits) \(algorithm.rawValue)")
            }
            let digest = Data(SHA256.hash(data: message))
            let signature = try sign(key, .ecdsaSignatureDigestX962SHA256, digest)
            #expect(try verify(publicKey, .ecdsaSignatureMessageX962SHA256, message, signature))
            let sealed = try AppleKeyExamples.encrypt(message, to: publicKey)
            #expect(try AppleKeyExamples.decrypt(sealed, with: key) == message)
            // Private and public external representations come back as the same key.
            let exported = try externalRepresentation(key)
            #expect(exported.count == 1 + 3 * ((bits + 7) / 8))
            let imported = try keyFromData(
                exported, type: kSecAttrKeyTypeECSECPrimeRandom, keyClass: kSecAttrKeyClassPrivate)
            #expect(imported == key)
        }
        let rsa = try randomKey(type: kSecAttrKeyTypeRSA, bits: 2048)
        let rsaPublic = try #require(SecKeyCopyPublicKey(rsa))
        #expect(SecKeyGetBlockSize(rsa) == 256)
        for algorithm: SecKeyAlgorithm in [.rsaSignatureMessagePKCS1v15SHA256, .rsaSignatureMessagePSSSHA256] {
            let signature = try sign(rsa, algorithm, message)
            #expect(try verify(rsaPublic, algorithm, message, signature))
        }
        let pkcs1 = try sign(rsa, .rsaSignatureDigestPKCS1v15SHA256, Data(SHA256.hash(data: message)))
        #expect(try verify(rsaPublic, .rsaSignatureMessagePKCS1v15SHA256, message, pkcs1))
        let rsaPEM = try _RSAPublicPEM(externalRepresentation(rsaPublic))
        #expect(try OpenSSL.verifies(signature: pkcs1, of: message, publicKeyPEM: rsaPEM))
        var error: Unmanaged<CFError>?
        let oaep = try #require(
            SecKeyCreateEncryptedData(rsaPublic, .rsaEncryptionOAEPSHA256, message as CFData, &error) as Data?)
        #expect(SecKeyCreateDecryptedData(rsa, .rsaEncryptionOAEPSHA256, oaep as CFData, &error) as Data? == message)

        // Algorithms a key does not do: errSecParam with Apple's message.
        #expect(!SecKeyIsAlgorithmSupported(rsa, .sign, .ecdsaSignatureMessageX962SHA256))
        #expect(!SecKeyIsAlgorithmSupported(rsaPublic, .sign, .rsaSignatureMessagePSSSHA256))
        error = nil
        #expect(SecKeyCreateSignature(rsa, .ecdsaSignatureMessageX962SHA256, message as CFData, &error) == nil)
        let failure = error?.takeRetainedValue()
        #expect(failure?.domain == NSOSStatusErrorDomain && failure?.code == Int(errSecParam))
        let description = failure.map { $0.localizedDescription } ?? ""
        #expect(description.contains("algorithm not supported by the key"), "\(description)")
        _ = environment
    }

    @Test(
        "Known answers: ECDH (raw and X9.63), Apple's ECIES on P-256/384/521 (variable and zero IV) and ECDSA verification, from the algorithms' definitions"
    )
    func knownAnswers() throws {
        let environment = try CompatEnvironment()
        let vectors = try KeyVectors.load()
        let ecdh = try #require(vectors["ecdh"] as? [String: Any])
        let a = try KeyVectors.privateKey(ecdh["a"])
        let b = try KeyVectors.publicKey(ecdh["b"])
        var error: Unmanaged<CFError>?
        for algorithm: SecKeyAlgorithm in [.ecdhKeyExchangeStandard, .ecdhKeyExchangeCofactor] {
            let shared = SecKeyCopyKeyExchangeResult(a, algorithm, b, NSDictionary(), &error) as Data?
            #expect(shared == KeyVectors.hex(ecdh["sharedSecret"]))
        }
        let x963 = try #require(vectors["ecdhX963"] as? [String: Any])
        let derived = try AppleKeyExamples.sharedKey(
            try KeyVectors.privateKey(x963["a"]), try KeyVectors.publicKey(x963["b"]),
            sharedInfo: KeyVectors.hex(x963["sharedInfo"]))
        #expect(derived == KeyVectors.hex(x963["output"]))

        for entry in try #require(vectors["ecies"] as? [[String: Any]]) {
            // Apple's private external representation: the public point, then the scalar.
            let recipient = try keyFromData(
                KeyVectors.hex(entry["recipientPublic"]) + KeyVectors.hex(entry["recipientPrivate"]),
                type: kSecAttrKeyTypeECSECPrimeRandom,
                keyClass: kSecAttrKeyClassPrivate)
            let algorithm = SecKeyAlgorithm(rawValue: try #require(entry["algorithm"] as? String) as NSString)
            let opened = SecKeyCreateDecryptedData(
                recipient, algorithm, KeyVectors.hex(entry["ciphertext"]) as CFData, &error)
            #expect(
                opened as Data? == KeyVectors.hex(entry["plaintext"]), "\(entry["curve"] ?? "") \(algorithm.rawValue)")
            var tampered = KeyVectors.hex(entry["ciphertext"])
            tampered[tampered.count - 20] ^= 1
            error = nil
            #expect(SecKeyCreateDecryptedData(recipient, algorithm, tampered as CFData, &error) == nil)
            #expect(error?.takeRetainedValue().code == Int(errSecDecode))
        }

        let ecdsa = try #require(vectors["ecdsa"] as? [String: Any])
        let signer = try keyFromData(
            KeyVectors.hex(ecdsa["public"]), type: kSecAttrKeyTypeECSECPrimeRandom, keyClass: kSecAttrKeyClassPublic)
        #expect(
            try verify(
                signer, .ecdsaSignatureMessageX962SHA256, KeyVectors.hex(ecdsa["message"]),
                KeyVectors.hex(ecdsa["signatureDER"])))
        #expect(
            SecKeyCopyAttributes(signer).flatMap { ($0 as? [String: Any])?["klbl"] as? Data }
                == KeyVectors.hex(ecdsa["applicationLabel"]))
        _ = environment
    }

    @Test(
        "A TPM key and a software key agree on the same secret both ways, and the TPM key decrypts what was sealed to its public key"
    )
    func tpmKeyAgreement() throws {
        let environment = try CompatEnvironment()
        let device = try AppleKeyExamples.makeAndStoreKey(name: "com.example.keys.agree")
        let devicePublic = try #require(SecKeyCopyPublicKey(device))
        let peer = try randomKey(type: kSecAttrKeyTypeECSECPrimeRandom, bits: 256)
        let peerPublic = try #require(SecKeyCopyPublicKey(peer))
        let info = Data("context".utf8)
        #expect(
            try AppleKeyExamples.sharedKey(device, peerPublic, sharedInfo: info)
                == AppleKeyExamples.sharedKey(peer, devicePublic, sharedInfo: info))
        // A peer on another curve is refused before the TPM is asked.
        let p384 = try #require(SecKeyCopyPublicKey(try randomKey(type: kSecAttrKeyTypeECSECPrimeRandom, bits: 384)))
        #expect(throws: (any Error).self) { _ = try AppleKeyExamples.sharedKey(device, p384, sharedInfo: info) }
        _ = environment
    }

    @Test(
        "Key queries: by tag, label, application label, class and type; attributes, persistent references; software keys stored with kSecAttrIsPermanent and added by kSecValueRef; no names in clear on disk"
    )
    func keyQueries() throws {
        let environment = try CompatEnvironment()
        let tpmKey = try AppleKeyExamples.makeAndStoreKey(name: "com.example.keys.query")
        let label = "query-label-\(UUID().uuidString)"
        let software = try randomKey(
            type: kSecAttrKeyTypeECSECPrimeRandom, bits: 384,
            extra: [kSecAttrIsPermanent as String: true, kSecAttrLabel as String: label])
        let added = try randomKey(type: kSecAttrKeyTypeRSA, bits: 2048)
        #expect(
            SecItemAdd(
                [
                    kSecClass as String: kSecClassKey, kSecValueRef as String: added,
                    kSecAttrApplicationTag as String: Data("added".utf8),
                ] as CFDictionary, nil) == errSecSuccess)
        #expect(
            SecItemAdd(
                [
                    kSecClass as String: kSecClassKey, kSecValueRef as String: added,
                    kSecAttrApplicationTag as String: Data("added".utf8),
                ] as CFDictionary, nil) == errSecDuplicateItem)

        func copy(_ query: [String: Any]) -> (OSStatus, AnyObject?) {
            var result: AnyObject?
            var full = query
            full[kSecClass as String] = kSecClassKey
            let status = SecItemCopyMatching(full as CFDictionary, &result)
            return (status, result)
        }
        let byLabel = copy([kSecAttrLabel as String: label, kSecReturnRef as String: true])
        #expect(byLabel.0 == errSecSuccess && (byLabel.1 as? SecKey) == software)
        let byApplicationLabel = copy([
            kSecAttrApplicationLabel as String: Data(
                Insecure.SHA1.hash(data: try externalRepresentation(try #require(SecKeyCopyPublicKey(tpmKey))))),
            kSecReturnRef as String: true,
        ])
        #expect((byApplicationLabel.1 as? SecKey) == tpmKey)
        let rsa = copy([kSecAttrKeyType as String: kSecAttrKeyTypeRSA, kSecReturnRef as String: true])
        #expect((rsa.1 as? SecKey) == added)
        let all = copy([
            kSecAttrKeyClass as String: kSecAttrKeyClassPrivate, kSecReturnAttributes as String: true,
            kSecReturnRef as String: true, kSecMatchLimit as String: kSecMatchLimitAll,
        ])
        let rows = try #require(all.1 as? [[String: Any]])
        #expect(rows.count == 3)
        let tpmRow = try #require(rows.first { $0[kSecAttrTokenID as String] as? String == "com.apple.setoken" })
        #expect(tpmRow[kSecAttrApplicationTag as String] as? Data == Data("com.example.keys.query".utf8))
        #expect(tpmRow["TKPK"] == nil && tpmRow[kSecValueData as String] == nil)
        #expect((tpmRow[kSecValueRef as String] as? SecKey) == tpmKey)
        let reference = copy([kSecAttrLabel as String: label, kSecReturnPersistentRef as String: true])
        let persistent = try #require(reference.1 as? Data)
        #expect(
            (copy([kSecValuePersistentRef as String: persistent, kSecReturnRef as String: true]).1 as? SecKey)
                == software)
        // A TPM key's value (its blob and authorization value) is never returned as data.
        #expect(
            copy([kSecAttrTokenID as String: kSecAttrTokenIDSecureEnclave, kSecReturnData as String: true]).0
                == errSecItemNotFound)
        // Nor replaced.
        #expect(
            SecItemUpdate(
                [kSecClass as String: kSecClassKey, kSecAttrTokenID as String: kSecAttrTokenIDSecureEnclave]
                    as CFDictionary,
                [kSecValueData as String: Data("x".utf8)] as CFDictionary) == errSecParam)
        // .privateKeyUsage belongs to keys.
        let password: [String: Any] = [
            kSecClass as String: kSecClassGenericPassword, kSecAttrService as String: "s",
            kSecAttrAccount as String: "a",
            kSecValueData as String: Data("v".utf8),
            kSecAttrAccessControl as String: SecAccessControlCreateWithFlags(
                nil, kSecAttrAccessibleWhenUnlocked, .privateKeyUsage, nil)!,
        ]
        #expect(SecItemAdd(password as CFDictionary, nil) == errSecParam)
        // Nothing that names a key is in clear on disk, nor a software private key.
        let privateBytes = try externalRepresentation(software)
        for path in try FileManager.default.subpathsOfDirectory(atPath: environment.directory) {
            guard let contents = FileManager.default.contents(atPath: environment.directory + "/" + path) else {
                continue
            }
            #expect(contents.range(of: Data(label.utf8)) == nil, "\(path)")
            #expect(contents.range(of: Data("com.example.keys.query".utf8)) == nil, "\(path)")
            #expect(contents.range(of: privateBytes.suffix(48)) == nil, "\(path)")
        }
        #expect(
            SecItemDelete(
                [kSecClass as String: kSecClassKey, kSecMatchLimit as String: kSecMatchLimitAll] as CFDictionary)
                == errSecSuccess)
        #expect(copy([:]).0 == errSecItemNotFound)
    }

    @Test(
        "SecKey parameters Apple refuses are refused: a TPM key that is not P-256 or not permanent, odd sizes, unknown tokens"
    )
    func keyParameters() throws {
        let environment = try CompatEnvironment()
        func status(_ parameters: [String: Any]) -> Int? {
            var error: Unmanaged<CFError>?
            guard SecKeyCreateRandomKey(parameters as CFDictionary, &error) == nil else { return nil }
            return error?.takeRetainedValue().code
        }
        let enclave = kSecAttrTokenIDSecureEnclave as String
        #expect(
            status([
                kSecAttrKeyType as String: kSecAttrKeyTypeEC, kSecAttrKeySizeInBits as String: 384,
                kSecAttrTokenID as String: enclave, kSecAttrIsPermanent as String: true,
            ]) == Int(errSecParam))
        #expect(
            status([
                kSecAttrKeyType as String: kSecAttrKeyTypeEC, kSecAttrKeySizeInBits as String: 256,
                kSecAttrTokenID as String: enclave,
            ]) == Int(errSecParam))
        #expect(
            status([kSecAttrKeyType as String: kSecAttrKeyTypeEC, kSecAttrKeySizeInBits as String: 255])
                == Int(errSecParam))
        #expect(
            status([kSecAttrKeyType as String: kSecAttrKeyTypeRSA, kSecAttrKeySizeInBits as String: 1024])
                == Int(errSecParam))
        #expect(
            status([
                kSecAttrKeyType as String: kSecAttrKeyTypeEC, kSecAttrKeySizeInBits as String: 256,
                kSecAttrTokenID as String: "com.example.token",
            ]) == Int(errSecParam))
        #expect(status([kSecAttrKeySizeInBits as String: 256]) == Int(errSecParam))
        _ = environment
    }

    // MARK: Helpers

    private func randomKey(type: CFString, bits: Int, extra: [String: Any] = [:]) throws -> SecKey {
        var parameters: [String: Any] = [kSecAttrKeyType as String: type, kSecAttrKeySizeInBits as String: bits]
        parameters.merge(extra) { $1 }
        var error: Unmanaged<CFError>?
        guard let key = SecKeyCreateRandomKey(parameters as CFDictionary, &error) else {
            throw error!.takeRetainedValue() as any Error
        }
        return key
    }

    private func sign(_ key: SecKey, _ algorithm: SecKeyAlgorithm, _ data: Data) throws -> Data {
        var error: Unmanaged<CFError>?
        guard let signature = SecKeyCreateSignature(key, algorithm, data as CFData, &error) as Data? else {
            throw error!.takeRetainedValue() as any Error
        }
        return signature
    }

    private func verify(_ key: SecKey, _ algorithm: SecKeyAlgorithm, _ data: Data, _ signature: Data) throws -> Bool {
        var error: Unmanaged<CFError>?
        return SecKeyVerifySignature(key, algorithm, data as CFData, signature as CFData, &error)
    }

    func externalRepresentation(_ key: SecKey) throws -> Data {
        var error: Unmanaged<CFError>?
        guard let data = SecKeyCopyExternalRepresentation(key, &error) as Data? else {
            throw error!.takeRetainedValue() as any Error
        }
        return data
    }

    private func keyFromData(_ data: Data, type: CFString, keyClass: CFString) throws -> SecKey {
        var error: Unmanaged<CFError>?
        guard
            let key = SecKeyCreateWithData(
                data as CFData,
                [kSecAttrKeyType as String: type, kSecAttrKeyClass as String: keyClass] as CFDictionary,
                &error)
        else {
            throw error!.takeRetainedValue() as any Error
        }
        return key
    }

    /// A PKCS#1 RSA public key as a PEM SubjectPublicKeyInfo, for openssl.
    private func _RSAPublicPEM(_ pkcs1: Data) throws -> String {
        let process = try OpenSSL.run(["rsa", "-RSAPublicKey_in", "-inform", "DER", "-pubout"], input: pkcs1)
        return String(decoding: process, as: UTF8.self)
    }
}

/// Fixtures/keys/vectors.json.
enum KeyVectors {
    static func load() throws -> [String: Any] {
        let url = ProjectFixtures.directory.appendingPathComponent("keys/vectors.json")
        return try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: url)) as? [String: Any])
    }

    static func hex(_ value: Any?) -> Data {
        Data((value as? String).flatMap { [UInt8](hexString: $0) } ?? [])
    }

    static func privateKey(_ party: Any?) throws -> SecKey {
        let fields = try #require(party as? [String: Any])
        return try make(hex(fields["privateExternalRepresentation"]), kSecAttrKeyClassPrivate)
    }

    static func publicKey(_ party: Any?) throws -> SecKey {
        let fields = try #require(party as? [String: Any])
        return try make(hex(fields["public"]), kSecAttrKeyClassPublic)
    }

    private static func make(_ data: Data, _ keyClass: CFString) throws -> SecKey {
        var error: Unmanaged<CFError>?
        guard
            let key = SecKeyCreateWithData(
                data as CFData,
                [kSecAttrKeyType as String: kSecAttrKeyTypeECSECPrimeRandom, kSecAttrKeyClass as String: keyClass]
                    as CFDictionary, &error)
        else {
            throw error!.takeRetainedValue() as any Error
        }
        return key
    }
}

/// The `openssl` command, an independent verifier.
enum OpenSSL {
    static func verifies(signature: Data, of message: Data, publicKeyPEM: String) throws -> Bool {
        let directory = NSTemporaryDirectory() + "tpm-keychain-openssl-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try Data(publicKeyPEM.utf8).write(to: URL(fileURLWithPath: directory + "/key.pem"))
        try signature.write(to: URL(fileURLWithPath: directory + "/signature"))
        let output = try run(
            ["dgst", "-sha256", "-verify", directory + "/key.pem", "-signature", directory + "/signature"],
            input: message, allowFailure: true)
        return String(decoding: output, as: UTF8.self).contains("Verified OK")
    }

    static func run(_ arguments: [String], input: Data, allowFailure: Bool = false) throws -> Data {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = arguments
        let stdin = Pipe()
        let stdout = Pipe()
        process.standardInput = stdin
        process.standardOutput = stdout
        process.standardError = FileHandle.nullDevice
        try process.run()
        stdin.fileHandleForWriting.write(input)
        try stdin.fileHandleForWriting.close()
        let output = stdout.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        if !allowFailure && process.terminationStatus != 0 {
            throw NSError(domain: "openssl", code: Int(process.terminationStatus))
        }
        return output
    }
}

/// Bridging as on Apple's platforms, where ported code relies on it.
extension SecItemTests {
    @Test(
        "Bridging: a result dictionary finds kSecAttrAccount as an AnyHashable key; an NSError out-parameter casts back to LAError"
    )
    func bridging() throws {
        let environment = try CompatEnvironment()
        let item: [String: Any] = [
            kSecClass as String: kSecClassGenericPassword, kSecAttrService as String: "bridging",
            kSecAttrAccount as String: "ada", kSecValueData as String: Data("v".utf8),
        ]
        #expect(SecItemAdd(item as CFDictionary, nil) == errSecSuccess)
        var result: AnyObject?
        let query: [String: Any] = [
            kSecClass as String: kSecClassGenericPassword, kSecAttrService as String: "bridging",
            kSecReturnAttributes as String: true,
        ]
        #expect(SecItemCopyMatching(query as CFDictionary, &result) == errSecSuccess)
        let attributes = try #require(result as? [AnyHashable: Any])
        #expect(attributes[kSecAttrAccount] as? String == "ada")
        #expect(attributes[kSecAttrService] as? String == "bridging")
        #expect(AnyHashable(kSecAttrAccount) == AnyHashable("acct"))

        environment.face.unenroll()
        var error: NSError?
        #expect(!LAContext().canEvaluatePolicy(.deviceOwnerAuthenticationWithBiometrics, error: &error))
        let laError = try #require(error as? LAError)
        #expect(laError.code == .biometryNotEnrolled)
        let thrown: any Error = try #require(error)
        switch thrown {
        case LAError.biometryNotEnrolled: break
        default: Issue.record("\(thrown) did not match LAError.biometryNotEnrolled")
        }
        // An NSError of another domain is no LAError.
        #expect((NSError(domain: "other", code: -7) as any Error) as? LAError == nil)
    }
}

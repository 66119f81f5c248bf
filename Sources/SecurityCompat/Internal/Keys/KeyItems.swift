import Crypto
import CryptoExtras
import Foundation
import KeychainVocabulary
import TPMKeychain

/// Keys as keychain items (kSecClassKey): made by SecKeyCreateRandomKey or added with
/// kSecValueRef, found again by SecItemCopyMatching with kSecReturnRef.
///
/// A software private key's item holds its external representation; a TPM key's item holds the
/// key's blob and authorization value (never returned). Both keep the public key in an
/// attribute of the store's own, so a reference to a protected key is made without a person.
enum KeyItems {
    static let secureEnclaveToken = "com.apple.setoken"

    // MARK: Creating

    static func createRandomKey(_ dictionary: CFDictionary) throws(SecStatus) -> SecKey {
        let top = KeyParameters(dictionary)
        // kSecPrivateKeyAttrs' entries apply to the private key, over the top level's.
        var merged = top
        if let privateAttributes = top.dictionary("private") { merged.entries.merge(privateAttributes.entries) { $1 } }
        guard let type = top.string("type") else {
            throw SecStatus(
                errSecParam, "kSecAttrKeyType is required (kSecAttrKeyTypeECSECPrimeRandom or kSecAttrKeyTypeRSA)")
        }
        guard let bits = top.int("bsiz") else { throw SecStatus(errSecParam, "kSecAttrKeySizeInBits is required") }
        let permanent = merged.bool("perm") ?? false
        if let token = top.string("tkid") {
            guard token == secureEnclaveToken else {
                throw SecStatus(
                    errSecParam, "Unknown kSecAttrTokenID \(token); the TPM is kSecAttrTokenIDSecureEnclave")
            }
            guard type == "73", bits == 256 else {
                throw SecStatus(errSecParam, "The TPM makes EC keys of 256 bits (P-256), as the Secure Enclave does")
            }
            guard permanent else {
                throw SecStatus(
                    errSecParam,
                    "A key in the TPM needs kSecAttrIsPermanent: the keychain item holds what authorizes its use, so that its access control is enforced at every use"
                )
            }
            return try createTPMKey(merged)
        }
        let material: KeyMaterial
        switch type {
        case "73":
            guard let curve = EllipticCurve(bits: bits) else {
                throw SecStatus(errSecParam, "EC keys have 256, 384 or 521 bits, not \(bits)")
            }
            let privateKey = curve.generate()
            material = .ec(
                curve, privateKey: privateKey,
                publicKey: try KeyOperations.crypto {
                    try curve.publicKey(ofPrivate: privateKey)
                })
        case "42":
            guard (2048...4096).contains(bits), bits % 8 == 0 else {
                throw SecStatus(errSecParam, "RSA keys have 2048 to 4096 bits (a multiple of 8), not \(bits)")
            }
            let key = try KeyOperations.crypto { try _RSA.Signing.PrivateKey(keySize: .init(bitCount: bits)) }
            material = .rsa(privateKey: key, publicKey: key.publicKey)
        default:
            throw SecStatus(errSecParam, "kSecAttrKeyType \(type) is not EC or RSA")
        }
        if permanent { try store(material, merged) }
        return SecKey(material)
    }

    /// Makes a P-256 key in the TPM and its item, under the access control given.
    private static func createTPMKey(_ parameters: KeyParameters) throws(SecStatus) -> SecKey {
        let items = try SecItemOperations.itemService()
        let group = try accessGroup(parameters)
        let control = try accessControl(parameters)
        let context = parameters.context()
        var enrollment: [UInt8]?
        if ItemService.bindsEnrollment(control) {
            let authenticator = context?.authenticator ?? KeychainEnvironment.authenticator
            enrollment = try Blocking.run { () async throws(SecStatus) in
                do { return try await ItemService.enrollment(binding: control, authenticator: authenticator) } catch {
                    throw SecStatus(SecItemOperations.status(error))
                }
            }
        }
        // Everything but what the new key's public key gives is checked before the TPM makes it.
        let base = try attributes(
            isPrivate: true, type: "73", bits: 256, parameters, group: group, token: secureEnclaveToken)
        var primary = base
        let publicKey = try SecItemOperations.mapped { () throws(KeychainError) in
            try items.createTPMKey(
                .signingAndKeyAgreement, control: control, enrollment: enrollment,
                forKeyFile: parameters.bool(kSecAttrTPMKeyFile as String) ?? false
            ) { publicKey in
                primary = completed(base, .ec(.p256, privateKey: nil, publicKey: publicKey))
                return primary
            }
        }
        guard
            let stored = try SecItemOperations.mapped({ () throws(KeychainError) in
                try items.item(.key, primary: primary, withSecret: false)
            })
        else {
            throw SecStatus(errSecItemNotFound, "The new key's item went away")
        }
        return SecKey(
            .tpm(
                TPMKeyItem(
                    location: items.location, reference: stored.reference, publicKey: publicKey, context: context,
                    prompt: parameters.string("u_OpPrompt"))))
    }

    /// SecItemAdd of kSecClassKey: a SecKey in kSecValueRef, or a key's external representation
    /// in kSecValueData with kSecAttrKeyType and kSecAttrKeyClass.
    static func add(_ request: SecItemRequest) throws(SecStatus) {
        let parameters = KeyParameters(request.dictionary)
        if let reference = request.valueReference {
            guard let key = reference as? SecKey else { throw SecStatus(errSecParam, "kSecValueRef is not a SecKey") }
            try store(key.material, parameters)
        } else if let data = request.valueData {
            guard let type = parameters.string("type"), let keyClass = parameters.string("kcls"), keyClass != "2"
            else {
                throw SecStatus(errSecParam, "A key given as data needs kSecAttrKeyType and kSecAttrKeyClass")
            }
            try store(try KeyMaterial.decode(Array(data), type: type, isPrivate: keyClass == "1"), parameters)
        } else {
            throw SecStatus(errSecParam, "A key item needs kSecValueRef or kSecValueData")
        }
    }

    /// Stores a software key as a key item (SecKeyCreateRandomKey with kSecAttrIsPermanent, or
    /// SecItemAdd with kSecValueRef).
    static func store(_ material: KeyMaterial, _ parameters: KeyParameters) throws(SecStatus) {
        guard let value = material.externalRepresentation else {
            throw SecStatus(errSecDuplicateItem, "A key that lives in the TPM is stored already")
        }
        let items = try SecItemOperations.itemService()
        let primary = completed(
            try attributes(
                isPrivate: material.isPrivate, type: material.keyType, bits: material.bits, parameters,
                group: try accessGroup(parameters), token: nil),
            material)
        try SecItemOperations.write(
            .key, primary: primary, mode: .add, value: ItemValue(kind: .data, bytes: value),
            control: try accessControl(parameters), items: items, context: parameters.context())
    }

    /// A key item's attributes: what the caller gave, and what Apple derives from the key's kind
    /// (``completed(_:_:)`` adds what the key itself gives).
    private static func attributes(
        isPrivate: Bool, type: String, bits: Int, _ parameters: KeyParameters, group: String, token: String?
    ) throws(SecStatus) -> AttributeList {
        var given: [FourCharacterCode: Any] = [:]
        for (key, value) in parameters.entries {
            guard let tag = FourCharacterCode(text: key), AttributeCoding.knownTags(.key).contains(tag) else {
                continue
            }
            given[tag] = value
        }
        given[AttributeTag.keyClass] = isPrivate ? "1" : "0"
        given[AttributeTag.type] = type
        given[AttributeTag.keySizeInBits] = NSNumber(value: bits)
        given[AttributeTag.effectiveKeySize] = NSNumber(value: bits)
        if let token { given[AttributeTag.tokenID] = token } else { given[AttributeTag.tokenID] = nil }
        given[AttributeTag.synchronizable] = nil
        var list = AttributeList()
        try AttributeCoding.apply(given, to: &list, itemClass: .key)
        list.setString(group, for: AttributeTag.accessGroup)
        return list
    }

    /// The attributes the key gives: its public key, and Apple's application label (the SHA-1 of
    /// the public key) unless the caller chose one.
    private static func completed(_ attributes: AttributeList, _ material: KeyMaterial) -> AttributeList {
        var list = attributes
        if list[AttributeTag.applicationLabel] == nil {
            list[AttributeTag.applicationLabel] = material.applicationLabel
        }
        list[AttributeTag.publicKey] = material.publicKeyBytes
        return list
    }

    private static func accessGroup(_ parameters: KeyParameters) throws(SecStatus) -> String {
        let caller = SecItemOperations.caller
        let group = parameters.string("agrp") ?? caller.accessGroups?.first ?? ""
        try SecItemOperations.requireEntitlement(.write, in: group, caller: caller)
        return group
    }

    private static func accessControl(_ parameters: KeyParameters) throws(SecStatus) -> AccessControl {
        if let control = parameters.entries["accc"] {
            guard let control = control as? SecAccessControl else {
                throw SecStatus(errSecParam, "kSecAttrAccessControl is not a SecAccessControl")
            }
            return control.accessControl
        }
        var accessibility = Accessibility.whenUnlocked
        if let code = parameters.string("pdmn") {
            guard let given = SecItemAccessibility.accessibility(code: code) else {
                throw SecStatus(errSecParam, "kSecAttrAccessible \(code) is unknown")
            }
            accessibility = given
        }
        return try SecItemOperations.mapped { () throws(KeychainError) in try AccessControl(accessibility) }
    }

    // MARK: Finding

    /// The SecKey a key item stands for. A software private key is read (asking the person for a
    /// protected one); a TPM key only refers to its item, and asks when it is used.
    static func key(
        of result: ItemQueryResult, _ request: SecItemRequest, items: ItemService
    ) throws(SecStatus) -> SecKey {
        let attributes = result.attributes
        if ItemService.holdsTPMKey(result) {
            guard let publicKey = attributes[AttributeTag.publicKey] else {
                throw SecStatus(errSecDecode, "The key item has no public key")
            }
            return SecKey(
                .tpm(
                    TPMKeyItem(
                        location: items.location, reference: result.reference, publicKey: publicKey,
                        context: request.context, prompt: request.prompt)))
        }
        guard let secret = try SecItemOperations.secret(of: result, request, items: items),
            let type = attributes.string(AttributeTag.type)
        else {
            throw SecStatus(errSecItemNotFound)
        }
        return SecKey(
            try KeyMaterial.decode(secret, type: type, isPrivate: attributes.string(AttributeTag.keyClass) == "1"))
    }

    // MARK: Describing

    /// SecKeyCopyAttributes' dictionary.
    static func attributes(of material: KeyMaterial) -> [String: Any] {
        let isPrivate = material.isPrivate
        var isEC = true
        if case .rsa = material { isEC = false }
        var dictionary: [String: Any] = [
            "class": "keys", "kcls": isPrivate ? "1" : "0", "type": material.keyType,
            "bsiz": NSNumber(value: material.bits), "esiz": NSNumber(value: material.bits),
            "klbl": Data(material.applicationLabel),
            "sign": NSNumber(value: isPrivate), "vrfy": NSNumber(value: !isPrivate),
            "decr": NSNumber(value: isPrivate), "encr": NSNumber(value: !isPrivate),
            "drve": NSNumber(value: isPrivate && isEC), "wrap": NSNumber(value: false),
            "unwp": NSNumber(value: isPrivate),
        ]
        if case .tpm = material {
            dictionary["tkid"] = secureEnclaveToken
            dictionary["extr"] = NSNumber(value: false)
            dictionary["sens"] = NSNumber(value: true)
        } else if let data = material.externalRepresentation {
            dictionary["v_Data"] = Data(data)
            dictionary["extr"] = NSNumber(value: true)
            dictionary["sens"] = NSNumber(value: false)
        }
        return dictionary
    }

    /// The parsed algorithm, when the key does `operation` with it; else errSecParam, with
    /// Apple's message.
    static func algorithm(
        _ algorithm: SecKeyAlgorithm, _ operation: SecKeyOperationType, _ key: SecKey
    ) throws(SecStatus) -> KeyAlgorithm {
        guard let parsed = KeyAlgorithm(algorithm), parsed.supports(operation, key.material) else {
            throw SecStatus(errSecParam, "\(algorithm.rawValue): algorithm not supported by the key")
        }
        return parsed
    }
}

/// A dictionary of SecKey's parameters by raw key, with the value types iOS code passes.
struct KeyParameters {
    var entries: [String: Any] = [:]

    init(_ dictionary: CFDictionary) {
        for (key, value) in dictionary {
            if let key = SecItemRequest.optionalString(key) { entries[key] = value }
        }
    }

    func string(_ key: String) -> String? {
        entries[key].flatMap(SecItemRequest.optionalString)
    }

    func int(_ key: String) -> Int? {
        if let number = entries[key] as? NSNumber { return number.intValue }
        if let number = entries[key] as? Int { return number }
        return string(key).flatMap { Int($0) }
    }

    func bool(_ key: String) -> Bool? {
        guard let value = entries[key] else { return nil }
        return try? SecItemRequest.bool(value)
    }

    func data(_ key: String) -> [UInt8]? {
        guard let value = entries[key] else { return nil }
        return (try? SecItemRequest.data(value)).map(Array.init)
    }

    func dictionary(_ key: String) -> KeyParameters? {
        (entries[key] as? NSDictionary).map { KeyParameters($0) }
            ?? (entries[key] as? [String: Any]).map { KeyParameters($0 as NSDictionary) }
    }

    func context() -> AuthenticationContext? {
        (entries["u_AuthCtx"] as? any AuthenticationContextProviding)?.authenticationContext
    }
}

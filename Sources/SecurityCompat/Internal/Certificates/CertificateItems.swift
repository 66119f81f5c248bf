import Foundation
import KeychainVocabulary
import TPMKeychain

/// Certificates as keychain items (kSecClassCertificate) with the attributes Apple derives from
/// them, and identities (kSecClassIdentity): a certificate item paired with the private key item
/// whose application label is the certificate's public key hash, as securityd pairs them.
enum CertificateItems {
    /// CSSM_CERT_X_509v3 and CSSM_CERT_ENCODING_DER, Apple's values for ctyp and cenc.
    static let x509v3 = 3
    static let derEncoding = 3

    // MARK: Certificates

    /// SecItemAdd of kSecClassCertificate: a SecCertificate in kSecValueRef, or DER in kSecValueData.
    static func add(_ request: SecItemRequest) throws(SecStatus) {
        let certificate: SecCertificate
        if let reference = request.valueReference {
            guard let given = reference as? SecCertificate else {
                throw SecStatus(errSecParam, "kSecValueRef is not a SecCertificate")
            }
            certificate = given
        } else if let data = request.valueData {
            guard let parsed = SecCertificateCreateWithData(nil, data as NSData) else {
                throw SecStatus(errSecParam, "kSecValueData is not a DER certificate")
            }
            certificate = parsed
        } else {
            throw SecStatus(errSecParam, "A certificate item needs kSecValueRef or kSecValueData")
        }
        try store(certificate, request)
    }

    static func store(_ certificate: SecCertificate, _ request: SecItemRequest) throws(SecStatus) {
        let caller = SecItemOperations.caller
        let group = request.accessGroup ?? caller.accessGroups?.first ?? ""
        try SecItemOperations.requireEntitlement(.write, in: group, caller: caller)
        let parsed = certificate.certificate
        var given = request.attributes
        given[FourCharacterCode("ctyp")] = NSNumber(value: x509v3)
        given[FourCharacterCode("cenc")] = NSNumber(value: derEncoding)
        given[AttributeTag.subject] = Data(parsed.subject)
        given[AttributeTag.issuer] = Data(parsed.issuer)
        given[AttributeTag.serialNumber] = Data(parsed.serialNumber)
        given[AttributeTag.publicKeyHash] = Data(parsed.publicKeyHash)
        if let identifier = parsed.subjectKeyIdentifier { given[FourCharacterCode("skid")] = Data(identifier) }
        if given[AttributeTag.label] == nil { given[AttributeTag.label] = parsed.subjectSummary }
        given[AttributeTag.synchronizable] = nil
        var primary = AttributeList()
        try AttributeCoding.apply(given, to: &primary, itemClass: .certificate)
        primary.setString(group, for: AttributeTag.accessGroup)
        if request.synchronizable == .yes { primary.setBool(true, for: AttributeTag.synchronizable) }
        let items = try SecItemOperations.itemService()
        let control = try SecItemOperations.mapped { () throws(KeychainError) in
            try AccessControl(request.accessibility ?? .whenUnlocked)
        }
        try SecItemOperations.write(
            .certificate, primary: primary, mode: .add, value: ItemValue(kind: .data, bytes: parsed.der),
            control: control, items: items, context: request.context)
    }

    /// The SecCertificate a certificate item holds.
    static func certificate(
        of result: ItemQueryResult, _ request: SecItemRequest, items: ItemService
    ) throws(SecStatus) -> SecCertificate {
        guard let der = try SecItemOperations.secret(of: result, request, items: items),
            let certificate = SecCertificateCreateWithData(nil, NSData(bytes: der, length: der.count))
        else {
            throw SecStatus(errSecDecode, "The certificate item does not hold a certificate")
        }
        return certificate
    }

    // MARK: Identities

    /// The identities a kSecClassIdentity query matches: the certificates it matches (its
    /// attributes are the certificate's), each with its private key; certificates without one
    /// are not identities.
    static func identities(
        _ request: SecItemRequest, items: ItemService
    ) throws(SecStatus) -> [(certificate: ItemQueryResult, key: ItemQueryResult)] {
        var certificates = request
        certificates.classCode = "cert"
        var found: [(ItemQueryResult, ItemQueryResult)] = []
        for certificate in try SecItemOperations.matches(certificates, items: items) {
            guard let hash = certificate.attributes[AttributeTag.publicKeyHash] else { continue }
            var matching = AttributeList()
            matching[AttributeTag.applicationLabel] = hash
            matching.setString("1", for: AttributeTag.keyClass)
            let keys = try SecItemOperations.mapped { () throws(KeychainError) in
                try items.query(.key, matching: matching)
            }
            // The service showed only keys of groups the caller may see.
            if let key = keys.first { found.append((certificate, key)) }
        }
        return found
    }

    /// SecItemCopyMatching of kSecClassIdentity: SecIdentity references, the certificate's
    /// attributes, or both; errSecItemNotFound when no certificate has its private key here.
    static func copyIdentities(_ request: SecItemRequest) throws(SecStatus) -> AnyObject? {
        let items = try SecItemOperations.itemService()
        var found = try identities(request, items: items)
        let limit = request.limit ?? 1
        if found.count > limit { found = Array(found.prefix(limit)) }
        guard !found.isEmpty else { throw SecStatus(errSecItemNotFound) }
        guard request.returns.contains(.ref) || request.returns.contains(.attributes) else { return nil }
        var shaped: [Any] = []
        for (certificateResult, keyResult) in found {
            var identity: SecIdentity?
            if request.returns.contains(.ref) {
                identity = SecIdentity(
                    certificate: try certificate(of: certificateResult, request, items: items),
                    privateKey: try KeyItems.key(of: keyResult, request, items: items))
            }
            if request.returns.contains(.attributes) {
                var dictionary = try SecItemOperations.attributes(of: certificateResult, items: items)
                dictionary["class"] = "idnt"
                if let identity { dictionary["v_Ref"] = identity }
                shaped.append(NSDictionary(dictionary: dictionary))
            } else if let identity {
                shaped.append(identity)
            }
        }
        return limit > 1 ? NSArray(array: shaped) : shaped[0] as AnyObject
    }

    /// SecItemDelete of kSecClassIdentity: each matching certificate and its private key.
    static func deleteIdentities(_ request: SecItemRequest) throws(SecStatus) {
        let items = try SecItemOperations.itemService()
        let found = try identities(request, items: items)
        guard !found.isEmpty else { throw SecStatus(errSecItemNotFound) }
        for (certificate, key) in found {
            _ = try SecItemOperations.mapped { () throws(KeychainError) in
                try items.delete(.certificate, primary: certificate.attributes)
            }
            _ = try SecItemOperations.mapped { () throws(KeychainError) in
                try items.delete(.key, primary: key.attributes)
            }
        }
    }

    /// SecItemAdd of kSecClassIdentity with a SecIdentity in kSecValueRef: its certificate, and
    /// its private key unless the key is in the TPM (stored already).
    static func addIdentity(_ request: SecItemRequest) throws(SecStatus) {
        guard let identity = request.valueReference as? SecIdentity else {
            throw SecStatus(errSecParam, "An identity item needs a SecIdentity in kSecValueRef")
        }
        if case .tpm = identity.privateKey.material {
        } else {
            do throws(SecStatus) {
                try KeyItems.store(identity.privateKey.material, KeyParameters(request.dictionary))
            } catch  where error.status == errSecDuplicateItem {}
        }
        try store(identity.certificate, request)
    }

    /// The identity of a certificate whose private key is stored here.
    static func identity(
        of certificate: SecCertificate, context: AuthenticationContext?
    ) throws(SecStatus) -> SecIdentity {
        let items = try SecItemOperations.itemService()
        var matching = AttributeList()
        matching[AttributeTag.applicationLabel] = certificate.certificate.publicKeyHash
        matching.setString("1", for: AttributeTag.keyClass)
        let keys = try SecItemOperations.mapped { () throws(KeychainError) in try items.query(.key, matching: matching)
        }
        guard let key = keys.first else { throw SecStatus(errSecItemNotFound) }
        var request = try SecItemRequest(NSDictionary())
        request.context = context
        return SecIdentity(certificate: certificate, privateKey: try KeyItems.key(of: key, request, items: items))
    }
}

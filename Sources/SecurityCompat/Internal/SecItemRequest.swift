import KeychainVocabulary
import TPMKeychain

/// A result code as an error, inside the layer; the public functions return it.
struct SecStatus: Error {
    let status: OSStatus
    /// What went wrong, for a CFError's description (SecKey's functions); nil: Apple's message for the code.
    let message: String?
    init(_ status: OSStatus, _ message: String? = nil) {
        self.status = status
        self.message = message
    }
}

/// A SecItem dictionary, parsed by Apple's key shapes: a four-character key is an attribute;
/// `class`, and the `m_`, `r_`, `v_` and `u_` groups are the class, search, return, value and
/// use keys. Values are accepted in every type iOS code passes (String or CFString, Bool,
/// NSNumber or kCFBooleanTrue, Data or NSData).
struct SecItemRequest {
    enum Return: Hashable { case data, attributes, ref, persistentRef }
    enum AuthenticationUI { case allow, fail, skip }

    var classCode: String?
    /// Attributes by tag, as given (pdmn, accc, agrp and sync are parsed into their own fields).
    var attributes: [FourCharacterCode: Any] = [:]
    var accessibility: Accessibility?
    var accessControl: AccessControl?
    var accessGroup: String?
    /// nil: absent (not synchronizable only).
    var synchronizable: ItemQuery.Synchronizable?
    /// nil: absent (the function's default).
    var limit: Int?
    var hasMatchKeys = false
    var returns: Set<Return> = []
    var hasReturnKeys = false
    var valueData: Data?
    var persistentReference: Data?
    var context: AuthenticationContext?
    var authenticationUI = AuthenticationUI.allow
    var prompt: String?
    /// Whether the class is kSecClassIdentity.
    var isIdentity: Bool { classCode == "idnt" }
    /// kSecValueRef: a SecKey, SecCertificate or SecIdentity to store.
    var valueReference: Any?
    /// The dictionary as given (key items read their parameters from it).
    let dictionary: CFDictionary

    init(_ dictionary: CFDictionary) throws(SecStatus) {
        self.dictionary = dictionary
        for (rawKey, value) in dictionary {
            guard let key = (rawKey as? String) ?? (rawKey as? NSString).map({ $0 as String }) else {
                throw SecStatus(errSecParam)
            }
            try parse(key, value)
        }
    }

    private mutating func parse(_ key: String, _ value: Any) throws(SecStatus) {
        switch key {
        case "class":
            classCode = try Self.string(value)
        case "pdmn":
            guard let accessibility = SecItemAccessibility.accessibility(code: try Self.string(value)) else {
                throw SecStatus(errSecParam)
            }
            self.accessibility = accessibility
        case "accc":
            guard let control = value as? SecAccessControl else { throw SecStatus(errSecParam) }
            accessControl = control.accessControl
        case "agrp":
            accessGroup = try Self.string(value)
        case "sync":
            if let text = Self.optionalString(value) {
                guard text == "syna" else { throw SecStatus(errSecParam) }
                synchronizable = .any
            } else {
                synchronizable = try Self.bool(value) ? .yes : .no
            }
        case "m_Limit":
            if let text = Self.optionalString(value) {
                switch text {
                case "m_LimitOne": limit = 1
                case "m_LimitAll": limit = Int.max
                default: throw SecStatus(errSecParam)
                }
            } else if let number = value as? NSNumber, number.intValue > 0 {
                limit = number.intValue
            } else {
                throw SecStatus(errSecParam)
            }
            hasMatchKeys = true
        case "r_Data", "r_Attributes", "r_Ref", "r_PersistentRef":
            // Apple: a return key's value must be a boolean; false means "not asked for".
            hasReturnKeys = true
            if try Self.bool(value) {
                returns.insert(
                    key == "r_Data"
                        ? .data : key == "r_Attributes" ? .attributes : key == "r_Ref" ? .ref : .persistentRef)
            }
        case "v_Data":
            valueData = try Self.data(value)
        case "v_PersistentRef":
            persistentReference = try Self.data(value)
        case "u_AuthCtx":
            guard let provider = value as? any AuthenticationContextProviding else { throw SecStatus(errSecParam) }
            context = provider.authenticationContext
        case "u_AuthUI":
            switch try Self.string(value) {
            case "u_AuthUIA": authenticationUI = .allow
            case "u_AuthUIF": authenticationUI = .fail
            case "u_AuthUIS": authenticationUI = .skip
            default: throw SecStatus(errSecParam)
            }
        case "u_NoAuthUI":
            if try Self.bool(value) { authenticationUI = .fail }
        case "u_OpPrompt":
            prompt = try Self.string(value)
        case "v_Ref":
            valueReference = value
        case "nleg":
            break // kSecUseDataProtectionKeychain is a no-op, as in securityd
        default:
            if key.hasPrefix("m_") {
                hasMatchKeys = true // other search keys: accepted, not used
            } else if let tag = FourCharacterCode(text: key) {
                attributes[tag] = value
            }
        // Other keys (u_, unknown): ignored, as securityd ignores keys it does not use.
        }
    }

    static func optionalString(_ value: Any) -> String? {
        (value as? String) ?? (value as? NSString).map { $0 as String }
    }

    static func string(_ value: Any) throws(SecStatus) -> String {
        guard let text = optionalString(value) else { throw SecStatus(errSecParam) }
        return text
    }

    static func bool(_ value: Any) throws(SecStatus) -> Bool {
        if let flag = value as? Bool { return flag }
        if let number = value as? NSNumber { return number.boolValue }
        throw SecStatus(errSecParam)
    }

    static func data(_ value: Any) throws(SecStatus) -> Data {
        if let data = value as? Data { return data }
        if let data = value as? NSData { return Data(referencing: data) }
        throw SecStatus(errSecParam)
    }

    /// The item class of a stored item (an identity is a certificate and a key item).
    func itemClass() throws(SecStatus) -> ItemClass {
        switch classCode {
        case "genp": .genericPassword
        case "inet": .internetPassword
        case "keys": .key
        case "cert": .certificate
        case "idnt": throw SecStatus(errSecParam) // identities are pairs, answered by CertificateItems
        default: throw SecStatus(errSecParam)
        }
    }
}

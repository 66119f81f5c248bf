import KeychainVocabulary
import TPMKeychain

/// The four SecItem operations over the item service, with iOS's semantics (docs/PORTING.md).
enum SecItemOperations {
    // MARK: Add

    static func add(_ request: SecItemRequest) throws(SecStatus) -> AnyObject? {
        if request.isIdentity {
            try CertificateItems.addIdentity(request)
            return nil
        }
        let itemClass = try request.itemClass()
        if itemClass == .key {
            try KeyItems.add(request)
            return nil
        }
        if itemClass == .certificate {
            try CertificateItems.add(request)
            return nil
        }
        // The service refuses a group the caller is not entitled to (errSecMissingEntitlement).
        let group = request.accessGroup ?? Self.caller.accessGroups?.first ?? ""
        var primary = AttributeList()
        try AttributeCoding.apply(request.attributes, to: &primary, itemClass: itemClass)
        primary.setString(group, for: AttributeTag.accessGroup)
        if request.synchronizable == .yes { primary.setBool(true, for: AttributeTag.synchronizable) }
        if request.synchronizable == .no { primary[AttributeTag.synchronizable] = nil }
        // iOS defaults to kSecAttrAccessibleWhenUnlocked; kSecAttrAccessControl sets the class too.
        let control: AccessControl
        if let given = request.accessControl {
            control = given
        } else {
            control = try mapped { () throws(KeychainError) in try AccessControl(request.accessibility ?? .whenUnlocked)
            }
        }
        let value = ItemValue(kind: .data, bytes: Array(request.valueData ?? Data()))
        let items = try itemService()
        try write(
            itemClass, primary: primary, mode: .add, value: value, control: control, items: items,
            context: request.context)
        guard !request.returns.isEmpty else { return nil }
        var query = ItemQuery(
            itemClass: itemClass, matching: primaryKeyAttributes(itemClass, primary), synchronizable: .any, limit: .one)
        query.returnsData = false
        let found = try mapped { () throws(KeychainError) in try items.query(query) }
        return try shape(found, request, items: items, many: false)
    }

    /// Writes an item under `control` (nil: it keeps its protection; `key` opens a protected one
    /// whose value is kept). The service decides whether it gets a key record.
    static func write(
        _ itemClass: ItemClass, primary: AttributeList, mode: ItemWriteMode, value: ItemValue?, control: AccessControl?,
        items: ItemService, context: AuthenticationContext?, key: ItemService.OpenedKey? = nil
    ) throws(SecStatus) {
        var enrollment: [UInt8]?
        if let control, ItemService.bindsEnrollment(control) {
            let authenticator = context?.authenticator ?? KeychainEnvironment.authenticator
            enrollment = try Blocking.run { () async throws(SecStatus) in
                do { return try await ItemService.enrollment(binding: control, authenticator: authenticator) } catch {
                    throw SecStatus(status(error))
                }
            }
        }
        try mapped { () throws(KeychainError) in
            try items.write(
                itemClass, primary: primary, mode: mode, value: value, control: control, enrollment: enrollment,
                key: key)
        }
    }

    // MARK: Copy matching

    static func copyMatching(_ request: SecItemRequest) throws(SecStatus) -> AnyObject? {
        if request.isIdentity { return try CertificateItems.copyIdentities(request) }
        let items = try itemService()
        var found = try matches(request, items: items)
        if request.authenticationUI == .skip {
            // Items that would ask a person are left out; lock-state-only ones are not.
            var kept: [ItemQueryResult] = []
            for result in found where try !mapped({ () throws(KeychainError) in try items.needsPerson(result) }) {
                kept.append(result)
            }
            found = kept
        }
        let limit = request.limit ?? 1
        if found.count > limit { found = Array(found.prefix(limit)) }
        guard !found.isEmpty else { throw SecStatus(errSecItemNotFound) }
        return try shape(found, request, items: items, many: limit > 1)
    }

    /// Every item a query matches, in creation order: the class, its attributes (pdmn and agrp
    /// too; a query without agrp sees the process's groups and items of no group), and sync as
    /// iOS reads it (absent: not synchronizable only). A persistent reference needs no class.
    static func matches(_ request: SecItemRequest, items: ItemService) throws(SecStatus) -> [ItemQueryResult] {
        // The service refuses a group the caller is not entitled to, and shows no item of one.
        let groups = items.caller.accessGroups ?? [""]
        var results: [ItemQueryResult]
        if let reference = request.persistentReference {
            guard let found = try mapped({ () throws(KeychainError) in try? items.item(reference: Array(reference)) })
            else { return [] }
            results = [found]
            if request.classCode != nil, try request.itemClass() != found.itemClass { return [] }
        } else {
            let itemClass = try request.itemClass()
            var matching = AttributeList()
            var attributes = request.attributes
            attributes[AttributeTag.synchronizable] = nil
            for (tag, value) in attributes {
                matching[tag] = try AttributeCoding.encode(value, for: tag).bytes
            }
            // The engine reads one group directory when the query names its service (or server)
            // and access group: one query per group the process may see, and items of no group.
            let searched = request.accessGroup.map { [$0] } ?? groups
            if let direct = try lookUp(itemClass, matching, request, groups: searched, items: items) {
                return filtered(direct, request)
            }
            results = []
            for group in searched {
                matching[AttributeTag.accessGroup] = group.isEmpty ? nil : Array(group.utf8)
                let found = try mapped { () throws(KeychainError) in
                    try items.query(
                        ItemQuery(
                            itemClass: itemClass, matching: matching, synchronizable: request.synchronizable ?? .no,
                            limit: .all))
                }
                results += found.filter {
                    group.isEmpty ? ($0.attributes.string(AttributeTag.accessGroup) ?? "").isEmpty : true
                }
            }
            if searched.count > 1 {
                // Creation order across groups, as one query gives it.
                results.sort { lhs, rhs in
                    let (left, right) = (
                        lhs.attributes.nanoseconds(AttributeTag.creationDate) ?? 0,
                        rhs.attributes.nanoseconds(AttributeTag.creationDate) ?? 0
                    )
                    return left != right ? left < right : lhs.reference.lexicographicallyPrecedes(rhs.reference)
                }
            }
        }
        return filtered(results, request)
    }

    private static func filtered(_ results: [ItemQueryResult], _ request: SecItemRequest) -> [ItemQueryResult] {
        results.filter { result in request.accessibility.map { $0 == result.accessibility } ?? true }
    }

    /// A generic password named by service and account is read by its file name, one per group
    /// and sync variant searched, instead of scanning its group's directory: the common lookup.
    /// nil when the query does not name one item that way.
    private static func lookUp(
        _ itemClass: ItemClass, _ matching: AttributeList, _ request: SecItemRequest, groups: [String],
        items: ItemService
    ) throws(SecStatus) -> [ItemQueryResult]? {
        guard itemClass == .genericPassword, matching[AttributeTag.service] != nil,
            matching[AttributeTag.account] != nil
        else { return nil }
        let variants: [Bool] =
            switch request.synchronizable ?? .no {
            case .no: [false]
            case .yes: [true]
            case .any: [false, true]
            }
        var found: [ItemQueryResult] = []
        for group in groups {
            for synchronizable in variants {
                var primary = AttributeList()
                primary[AttributeTag.service] = matching[AttributeTag.service]
                primary[AttributeTag.account] = matching[AttributeTag.account]
                if !group.isEmpty { primary.setString(group, for: AttributeTag.accessGroup) }
                if synchronizable { primary.setBool(true, for: AttributeTag.synchronizable) }
                let withSecret = request.returns.contains(.data)
                guard
                    let item = try mapped({ () throws(KeychainError) in
                        try items.item(itemClass, primary: primary, withSecret: withSecret)
                    })
                else {
                    continue
                }
                // Every other attribute the query names must match too.
                let matches = matching.tags.allSatisfy { tag in
                    tag == AttributeTag.accessGroup || item.attributes[tag] == matching[tag]
                }
                if matches { found.append(item) }
            }
        }
        return found.sorted { lhs, rhs in
            let (left, right) = (
                lhs.attributes.nanoseconds(AttributeTag.creationDate) ?? 0,
                rhs.attributes.nanoseconds(AttributeTag.creationDate) ?? 0
            )
            return left != right ? left < right : lhs.reference.lexicographicallyPrecedes(rhs.reference)
        }
    }

    /// What SecItemCopyMatching (and SecItemAdd) return: data or a persistent reference alone as
    /// CFData, else a dictionary; an array of those when more than one may match.
    static func shape(
        _ found: [ItemQueryResult], _ request: SecItemRequest, items: ItemService, many: Bool
    ) throws(SecStatus) -> AnyObject? {
        let returns = request.returns.subtracting([.ref])
        guard !returns.isEmpty || request.returns.contains(.ref) else {
            // No result asked for: the existence check. A protected item exists without a prompt.
            return nil
        }
        var shaped: [Any] = []
        for result in found {
            var secret: [UInt8]?
            if returns.contains(.data) {
                do {
                    secret = try self.secret(of: result, request, items: items)
                } catch  where error.status == errSecItemNotFound && many {
                    continue // invalidated (and deleted) on the way, as iOS drops it
                }
                // A TPM key has no data to return; with a reference or attributes, it is still found.
                guard secret != nil || (result.kind == .tpmKey && returns != [.data]) else { continue }
            }
            if request.returns.contains(.ref), let object = try reference(of: result, request, items: items) {
                guard !returns.isEmpty else {
                    shaped.append(object)
                    continue
                }
                var dictionary = returns.contains(.attributes) ? try attributes(of: result, items: items) : [:]
                dictionary["v_Ref"] = object
                if let secret { dictionary["v_Data"] = NSData(bytes: secret, length: secret.count) }
                if returns.contains(.persistentRef) {
                    dictionary["v_PersistentRef"] = NSData(bytes: result.reference, length: result.reference.count)
                }
                shaped.append(NSDictionary(dictionary: dictionary))
            } else if returns == [.data], let secret {
                shaped.append(NSData(bytes: secret, length: secret.count))
            } else if returns == [.persistentRef] {
                shaped.append(NSData(bytes: result.reference, length: result.reference.count))
            } else {
                var dictionary: [String: Any] = [:]
                if returns.contains(.attributes) || request.returns.contains(.ref) {
                    dictionary = try attributes(of: result, items: items)
                }
                if let secret { dictionary["v_Data"] = NSData(bytes: secret, length: secret.count) }
                if returns.contains(.persistentRef) {
                    dictionary["v_PersistentRef"] = NSData(bytes: result.reference, length: result.reference.count)
                }
                shaped.append(NSDictionary(dictionary: dictionary))
            }
        }
        guard !shaped.isEmpty else { throw SecStatus(errSecItemNotFound) }
        return many ? NSArray(array: shaped) : shaped[0] as AnyObject
    }

    /// What kSecReturnRef returns for a key (SecKey) or certificate (SecCertificate) item; nil
    /// for passwords, which have no reference type.
    static func reference(
        of result: ItemQueryResult, _ request: SecItemRequest, items: ItemService
    ) throws(SecStatus) -> AnyObject? {
        switch result.itemClass {
        case .key: try KeyItems.key(of: result, request, items: items)
        case .certificate: try CertificateItems.certificate(of: result, request, items: items)
        default: nil
        }
    }

    /// The attributes dictionary of a result: class, every stored attribute with its type,
    /// pdmn, sync, and accc for an item with access-control flags.
    static func attributes(of result: ItemQueryResult, items: ItemService) throws(SecStatus) -> [String: Any] {
        var dictionary = AttributeCoding.dictionary(of: result.attributes)
        dictionary["class"] = result.itemClass.code.description
        dictionary["pdmn"] = SecItemAccessibility.code(result.accessibility)
        dictionary["sync"] = NSNumber(value: result.attributes.bool(AttributeTag.synchronizable) ?? false)
        if let control = try mapped({ () throws(KeychainError) in try items.accessControl(of: result) }),
            !control.flags.isEmpty
        {
            dictionary["accc"] = SecAccessControl(control)
        }
        return dictionary
    }

    /// A result's secret, asking the person through the request's context (or one made for the
    /// call) when the item is protected.
    static func secret(
        of result: ItemQueryResult, _ request: SecItemRequest, items: ItemService
    ) throws(SecStatus) -> [UInt8]? {
        // A TPM key's blob and authorization value are used, never returned.
        guard result.kind != .tpmKey else { return nil }
        if let value = result.value { return value } // read with the attributes already
        let key = try openedKey(for: result, request, items: items)
        return try mapped { () throws(KeychainError) in try items.secret(of: result, key: key) }
    }

    static func openedKey(
        for result: ItemQueryResult, _ request: SecItemRequest, items: ItemService
    ) throws(SecStatus) -> ItemService.OpenedKey? {
        guard result.isProtected else { return nil }
        // "If no context is given, a new context will be created just for the purpose of the single call."
        let context = request.context ?? KeychainEnvironment.makeContext()
        if let prompt = request.prompt { context.localizedReason = prompt }
        if let kept = try mapped({ () throws(KeychainError) in try items.keptKey(for: result, context: context) }) {
            return kept
        }
        let allowsInteraction = request.authenticationUI != .fail
        return try Blocking.run { () async throws(SecStatus) in
            do {
                return try await items.openKey(for: result, context: context, allowsInteraction: allowsInteraction)
            } catch {
                throw SecStatus(status(error))
            }
        }
    }

    // MARK: Support

    static func itemService() throws(SecStatus) -> ItemService {
        let location = KeychainEnvironment.location
        return try mapped { () throws(KeychainError) in try ItemService(location: location, caller: caller) }
    }

    static func primaryKeyAttributes(_ itemClass: ItemClass, _ attributes: AttributeList) -> AttributeList {
        var primary = AttributeList()
        for tag in itemClass.primaryKey where tag != AttributeTag.synchronizable {
            primary[tag] = attributes[tag] ?? []
        }
        return primary
    }

    /// The store's error as a result code; why no TPM was found stays findable
    /// (``KeychainEnvironment/lastUnavailableReason``, and the logger).
    static func mapped<R>(_ body: () throws(KeychainError) -> R) throws(SecStatus) -> R {
        do {
            return try body()
        } catch {
            let code = status(error.code)
            KeychainEnvironment.recordStoreError(error)
            if code == errSecNotAvailable { KeychainEnvironment.recordUnavailable(error) }
            throw SecStatus(code, error.message)
        }
    }

    static func status(_ error: any Error) -> OSStatus {
        if let status = error as? SecStatus { return status.status }
        if let error = error as? KeychainError { return status(error.code) }
        if let error = error as? AuthenticationError { return status(KeychainError(error).code) }
        return errSecInternalComponent
    }

    /// The result code iOS gives for what the store reports.
    static func status(_ code: KeychainError.Code) -> OSStatus {
        switch code {
        case .itemNotFound, .itemInvalidated: errSecItemNotFound
        case .duplicateItem: errSecDuplicateItem
        case .invalidParameter: errSecParam
        case .tampered, .decodingFailed, .unsupportedVersion, .rolledBack: errSecDecode
        case .interactionNotAllowed: errSecInteractionNotAllowed
        case .missingEntitlement: errSecMissingEntitlement
        case .userCanceled: errSecUserCanceled
        case .authenticationFailed, .lockout, .passcodeNotSet: errSecAuthFailed
        case .tpmUnavailable, .wrongTPM, .rollbackCounterMissing, .notAvailable, .biometryNotEnrolled, .storeNotFound,
            .timedOut:
            errSecNotAvailable
        case .storageFailed, .permissionDenied, .unsafeFileSystem: errSecIO
        default: errSecInternalComponent
        }
    }
}

public import FoundationEssentials
public import KeychainVocabulary

/// A service's items in a TPM-sealed keychain store: Apple's Keychain model on Linux.
///
/// Items are named by service (and optional access group) plus account, hold any `Codable`
/// value, and are encrypted with AES-256-GCM under keys derived from a master key that only this
/// machine's TPM can unseal. `Keychain` is a small value: create it wherever convenient, share it
/// between threads and tasks, and every copy uses the same opened store.
///
/// ```swift
/// let keychain = try Keychain(service: "com.example.api")
/// try keychain.set(token, forKey: "accessToken")
/// let token: String? = try keychain.get("accessToken")
/// ```
///
/// - Important: the first operation on a store unseals its master key with the TPM (a few
///   milliseconds); later operations are file I/O and AES-GCM.
public struct Keychain: Sendable, Hashable, CustomStringConvertible {
    /// The service of every item this value reads and writes (kSecAttrService).
    public let service: String
    /// The access group (kSecAttrAccessGroup), a namespace inside the store; nil for none.
    ///
    /// - Important: an access group separates names, it is not a boundary: every process that
    ///   can open the store can open every group.
    public let accessGroup: String?
    /// The store.
    public let location: KeychainLocation
    /// Who asks through this value: the Keychain API, unless a face built on it says it is the
    /// caller (``acting(for:)``). Every operation is decided for it (``AccessDecision``).
    package private(set) var caller = AccessCaller(face: .keychain)

    /// The service, access group and store path: nothing secret.
    public var description: String {
        "Keychain(service: \"\(service)\"\(accessGroup.map { ", accessGroup: \"\($0)\"" } ?? ""), \(location.path))"
    }

    /// A keychain for `service` in the store at `location`. Only the names are checked here:
    /// the store is opened by the first operation.
    ///
    /// - Parameters:
    ///   - service: the service the items belong to (kSecAttrService), 1 to 1024 bytes of UTF-8.
    ///   - accessGroup: a namespace inside the store (kSecAttrAccessGroup).
    ///   - location: the store; ``KeychainLocation/default`` unless told otherwise.
    /// - Throws: ``KeychainError`` `.invalidParameter` for an empty or oversized service or access group.
    public init(
        service: String, accessGroup: String? = nil, location: KeychainLocation = .default
    ) throws(KeychainError) {
        try ItemIdentity.validate(service, "service", allowEmpty: false)
        if let accessGroup { try ItemIdentity.validate(accessGroup, "access group", allowEmpty: false) }
        self.service = service
        self.accessGroup = accessGroup
        self.location = location
    }

    /// A keychain for a service written in the source, which cannot fail at run time, so a
    /// `static let` needs no `try`:
    ///
    /// ```swift
    /// static let keychain = Keychain(literalService: "com.example.api")
    /// ```
    ///
    /// - Important: an empty service is a programming error and stops the program, as an invalid
    ///   `StaticString` format would; names that come from input go through ``init(service:accessGroup:location:)``.
    public init(literalService service: StaticString, location: KeychainLocation = .default) {
        let text = service.withUTF8Buffer { String(decoding: $0, as: UTF8.self) }
        precondition(
            !text.isEmpty && text.utf8.count <= ItemIdentity.maximumNameBytes,
            "Keychain(literalService:) needs a service of 1 to \(ItemIdentity.maximumNameBytes) bytes")
        self.service = text
        self.accessGroup = nil
        self.location = location
    }

    // MARK: Writing

    /// Stores `value` for `key`, replacing any value already there (upsert). Attributes left nil
    /// keep what the item had.
    ///
    /// A nil optional removes the item, as `keychain["key"] = nil` does in KeychainAccess:
    /// storing "nothing" never leaves an item behind (nor the text `null`).
    ///
    /// - Throws: ``KeychainError`` `.invalidParameter` (empty or oversized key, value over 16 MiB),
    ///   `.tampered` (the stored item is damaged; remove it first), `.tpmUnavailable`, `.wrongTPM`.
    public func set<Value: Encodable>(
        _ value: Value, forKey key: String, label: String? = nil, comment: String? = nil,
        genericData: Data? = nil, accessibility: Accessibility? = nil
    ) throws(KeychainError) {
        if isNilOptional(value) {
            try remove(key)
            return
        }
        try write(
            value, key, .upsert,
            AttributeChanges(label: label, comment: comment, genericData: genericData, accessibility: accessibility))
    }

    /// Stores `value` for `key` only if there is no item yet.
    ///
    /// - Throws: ``KeychainError`` `.duplicateItem` if the key exists, and what ``set(_:forKey:label:comment:genericData:accessibility:)`` throws.
    ///   A nil optional is refused with `.invalidParameter`: there is nothing to add.
    public func add<Value: Encodable>(
        _ value: Value, forKey key: String, label: String? = nil, comment: String? = nil,
        genericData: Data? = nil, accessibility: Accessibility? = nil
    ) throws(KeychainError) {
        if isNilOptional(value) {
            throw KeychainError(.invalidParameter, "Cannot add nil for \"\(key)\": there is no value to store")
        }
        try write(
            value, key, .add,
            AttributeChanges(label: label, comment: comment, genericData: genericData, accessibility: accessibility))
    }

    /// Changes an existing item's attributes without touching its value. Attributes left nil keep
    /// their value; those in `removing` are removed (a nil cannot say "remove").
    ///
    /// ```swift
    /// try keychain.updateAttributes(forKey: "token", removing: [.comment])
    /// ```
    ///
    /// - Throws: ``KeychainError`` `.itemNotFound`.
    public func updateAttributes(
        forKey key: String, label: String? = nil, comment: String? = nil,
        genericData: Data? = nil, accessibility: Accessibility? = nil,
        removing: Set<RemovableAttribute> = []
    ) throws(KeychainError) {
        let (service, identity) = (try itemService(), try identity(key))
        try service.write(
            identity, mode: .update, value: nil,
            changes: AttributeChanges(
                label: label, comment: comment, genericData: genericData,
                accessibility: accessibility, clearing: Set(removing.map(\.tag))))
    }

    private func write<Value: Encodable>(
        _ value: Value, _ key: String, _ mode: ItemWriteMode,
        _ changes: AttributeChanges
    ) throws(KeychainError) {
        let identity = try identity(key)
        let encoded = try ValueCoding.encode(value)
        try itemService().write(identity, mode: mode, value: encoded, changes: changes)
    }

    // MARK: Reading

    /// The value for `key` decoded as `Value`, or nil when there is no such item.
    ///
    /// - Throws: ``KeychainError`` `.decodingFailed` when the stored bytes are not a `Value`
    ///   (for example not UTF-8 for a String), `.tampered`, `.tpmUnavailable`, `.wrongTPM`.
    public func get<Value: Decodable>(_ key: String, as type: Value.Type = Value.self) throws(KeychainError) -> Value? {
        let (service, identity) = (try itemService(), try identity(key))
        guard let value = try service.value(identity) else { return nil }
        return try ValueCoding.decode(value, as: type, key: key)
    }

    /// The string for `key`, or nil. - Throws: as ``get(_:as:)``.
    public func string(forKey key: String) throws(KeychainError) -> String? { try get(key, as: String.self) }

    /// The bytes for `key`, or nil. - Throws: as ``get(_:as:)``.
    public func data(forKey key: String) throws(KeychainError) -> Data? { try get(key, as: Data.self) }

    /// The Boolean for `key` (stored as `true`/`false`, `1`/`0` also read), or nil. - Throws: as ``get(_:as:)``.
    public func bool(forKey key: String) throws(KeychainError) -> Bool? { try get(key, as: Bool.self) }

    /// The integer for `key` (stored as decimal text), or nil. - Throws: as ``get(_:as:)``.
    public func int(forKey key: String) throws(KeychainError) -> Int? { try get(key, as: Int.self) }

    /// The number for `key` (stored as decimal text), or nil. - Throws: as ``get(_:as:)``.
    public func double(forKey key: String) throws(KeychainError) -> Double? { try get(key, as: Double.self) }

    /// The string for `key`, or nil: `try keychain["accessToken"]`.
    ///
    /// Read-only, because a subscript setter cannot throw and a keychain write can fail; write
    /// with ``set(_:forKey:label:comment:genericData:accessibility:)`` (nil removes).
    ///
    /// - Throws: as ``get(_:as:)``.
    public subscript(key: String) -> String? {
        get throws(KeychainError) { try string(forKey: key) }
    }

    /// Whether an item exists for `key`; its secret is not decrypted.
    ///
    /// - Throws: ``KeychainError`` `.tampered` when the file is there but damaged.
    public func contains(_ key: String) throws(KeychainError) -> Bool {
        try attributes(forKey: key) != nil
    }

    /// The attributes of the item for `key` (label, comment, dates, generic data), without its secret.
    ///
    /// - Throws: ``KeychainError`` `.tampered` when the file is there but damaged or misplaced.
    public func attributes(forKey key: String) throws(KeychainError) -> ItemAttributes? {
        let (service, identity) = (try itemService(), try identity(key))
        return try service.attributes(identity)
    }

    /// The accounts (keys) of this service, in the order their items were created (as Apple's
    /// match-limit-all lists them).
    ///
    /// - Throws: ``KeychainError`` `.tampered` when a file of the service is damaged or misplaced.
    public func allKeys() throws(KeychainError) -> [String] {
        try allItems().map(\.account)
    }

    /// The attributes of every item of this service, in creation order.
    ///
    /// - Throws: ``KeychainError`` `.tampered` when a file of the service is damaged or misplaced.
    public func allItems() throws(KeychainError) -> [ItemAttributes] {
        let (items, group) = (try itemService(), accessGroup ?? "")
        return try items.list(service: service, accessGroup: group)
    }

    // MARK: Removing

    /// Removes the item for `key`.
    ///
    /// - Returns: false if there was none.
    /// - Throws: ``KeychainError`` `.tampered` when the item's file was misplaced (renamed or moved),
    ///   `.timedOut` when another process holds the service's lock past the timeout.
    @discardableResult
    public func remove(_ key: String) throws(KeychainError) -> Bool {
        let (service, identity) = (try itemService(), try identity(key))
        return try service.delete(identity)
    }

    /// Removes every item of this service (and access group).
    ///
    /// - Returns: how many were removed.
    /// - Throws: ``KeychainError`` `.timedOut` when another process holds the service's lock past
    ///   the timeout, `.storageFailed`.
    @discardableResult
    public func removeAll() throws(KeychainError) -> Int {
        let (items, group) = (try itemService(), accessGroup ?? "")
        return try items.deleteAll(service: service, accessGroup: group)
    }

    // MARK: Store

    /// Erases the store's keys from this process's memory. The next operation on the store
    /// unseals its master key with the TPM again.
    public static func closeStore(_ location: KeychainLocation = .default) {
        OpenStores.close(location)
    }

    /// Every item in the store, all services, in creation order.
    ///
    /// - Throws: ``KeychainError``.
    public static func allItems(in location: KeychainLocation = .default) throws(KeychainError) -> [ItemAttributes] {
        try ItemService(location: location, caller: AccessCaller(face: .keychain)).listAll()
    }

    /// This keychain, asked through `face`: a face built on the Keychain API names itself as the
    /// caller, so that the decision point knows who asks.
    package func acting(for face: AccessCaller.Face) -> Keychain {
        var keychain = self
        keychain.caller = AccessCaller(face: face)
        return keychain
    }

    func itemService() throws(KeychainError) -> ItemService {
        try ItemService(location: location, caller: caller)
    }

    private func isNilOptional<Value>(_ value: Value) -> Bool {
        // Only an Optional can be nil. Asking its metadata first spares every other value the
        // cast to an existential, a conformance lookup that was 3 % of a durable set's own time.
        guard _isOptional(Value.self) else { return false }
        return (value as? any OptionalValue)?.isNone ?? false
    }

    func identity(_ key: String) throws(KeychainError) -> ItemIdentity {
        try ItemIdentity(accessGroup: accessGroup ?? "", service: service, account: key)
    }
}

/// Lets generic code ask whether a value is an empty Optional, however deeply wrapped.
private protocol OptionalValue {
    var isNone: Bool { get }
}

extension Optional: OptionalValue {
    var isNone: Bool {
        switch self {
        case .none: true
        case .some(let wrapped): (wrapped as? any OptionalValue)?.isNone ?? false
        }
    }
}

/// The attributes an item can lose: ``Keychain/updateAttributes(forKey:label:comment:genericData:accessibility:removing:)``.
public enum RemovableAttribute: Sendable, Hashable, CaseIterable {
    /// kSecAttrLabel.
    case label
    /// kSecAttrComment.
    case comment
    /// kSecAttrGeneric.
    case genericData

    var tag: FourCharacterCode {
        switch self {
        case .label: AttributeTag.label
        case .comment: AttributeTag.comment
        case .genericData: AttributeTag.generic
        }
    }
}

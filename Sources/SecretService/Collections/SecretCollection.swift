import FoundationEssentials
import KeychainVocabulary
import TPMKeychain

#if canImport(Glibc)
import Glibc
#endif

/// One collection: a TPMKeychain store (or, for the `session` collection, memory that ends with
/// the daemon), its items indexed, and whether it is locked. Used on the daemon's loop thread only.
final class SecretCollection {
    /// The store's name in the data directory; `session` for the in-memory collection.
    let name: String
    /// The last element of the collection's object path.
    let id: String
    let storePath: String?
    private(set) var label: String
    private(set) var created: UInt64
    private(set) var modified: UInt64
    /// What unlocking the collection asks (its properties item's protection); nil: nothing.
    var accessControl: AccessControl?
    /// Lock() was called: a collection without access control stays locked until Unlock.
    var lockedByRequest = false
    /// Key records opened by the last unlock, by record ID; dropped by Lock().
    var openedKeys: [[UInt8]: ItemService.OpenedKey] = [:]
    /// The enrollment a biometryCurrentSet collection's new items bind to, read at unlock.
    var enrollment: [UInt8]?
    /// The collection's properties item, when it has one (label, access control, rules).
    var propertiesItem: ItemQueryResult?
    /// The programs (absolute paths of executables) that may use the items; nil: any.
    var allowedExecutables: [String]?
    /// Every read of a secret needs a confirmation prompt first (one per read call).
    var confirmsEachAccess = false

    var service: ItemService?
    var index: ItemIndex?
    private var memorySecrets: [String: (secret: [UInt8], contentType: String)] = [:]
    var fingerprint: [Int64] = []

    static let sessionName = "session"

    /// A collection over the store at `storePath`, opened at its first use.
    init(name: String, storePath: String) {
        self.name = name
        self.id = ObjectPaths.element(for: name)
        self.storePath = storePath
        label = name
        // What the store directory says until the collection is opened: no secret needed for it.
        created = UInt64(max(0, Self.modificationTime(storePath) / 1_000_000_000))
        modified = created
    }

    /// The in-memory `session` collection.
    init(memoryNamed name: String, label: String) {
        self.name = name
        self.id = ObjectPaths.element(for: name)
        storePath = nil
        self.label = label
        created = UInt64(Date().timeIntervalSince1970)
        modified = created
        index = ItemIndex()
    }

    var path: String { ObjectPaths.collection(id) }
    var isInMemory: Bool { storePath == nil }

    /// The TPM the store's key is sealed to, as its metadata records it, for the
    /// `org.tpmkeychain.Collection.TPM` property and the daemon's warnings: "SIMULATED: ..." when
    /// nothing in it is bound to hardware (README's rule).
    var tpmDescription: String {
        guard let storePath else { return "none: the session collection lives in the daemon's memory" }
        let location = try? KeychainLocation(path: storePath)
        guard let kind = location?.recordedTPM else { return "not recorded (a store older than that record)" }
        return location?.recordedTPMIsSimulated == true
            ? "SIMULATED: \(kind); nothing in it is bound to hardware" : kind
    }

    /// Whether the store's metadata says its key is sealed to a simulated TPM.
    var isSimulated: Bool {
        storePath.map { (try? KeychainLocation(path: $0))?.recordedTPMIsSimulated == true } ?? false
    }

    // MARK: Items

    /// Every item, oldest first.
    func items() throws(SecretServiceError) -> [SecretItem] {
        try currentIndex().search([:])
    }

    func search(_ attributes: [String: String]) throws(SecretServiceError) -> [SecretItem] {
        try currentIndex().search(attributes)
    }

    func item(_ id: String) throws(SecretServiceError) -> SecretItem? {
        try currentIndex()[id]
    }

    /// The item's secret and content type.
    ///
    /// - Throws: ``SecretServiceError`` `.isLocked` when the collection is locked, or the item is
    ///   protected and its key is not open; `.noSuchObject` when it went away.
    func secret(of item: SecretItem) throws(SecretServiceError) -> (secret: [UInt8], contentType: String) {
        guard !isLocked else { throw SecretServiceError(.isLocked, "The collection \"\(label)\" is locked") }
        guard let service else {
            guard let kept = memorySecrets[item.id] else { throw Self.gone(item) }
            return kept
        }
        let key = item.isProtected ? openedKeys[item.keyRecord] : nil
        if item.isProtected && key == nil {
            throw SecretServiceError(.isLocked, "The collection \"\(label)\" is locked: unlock it first")
        }
        let value: [UInt8]?
        do {
            // The index has the attributes: only the secret is read and decrypted.
            value = try service.secret(of: item.identity, key: key)
        } catch {
            throw SecretServiceError(error)
        }
        guard let value else { throw Self.gone(item) }
        return (value, item.contentType)
    }

    /// Creates an item, or with `replace` rewrites the one whose attributes are exactly these.
    ///
    /// - Returns: the item, and whether it is new.
    func create(
        label: String, attributes: [String: String], secret: [UInt8], contentType: String, replace: Bool
    ) throws(SecretServiceError) -> (item: SecretItem, isNew: Bool) {
        try checkWritable()
        let existing = replace ? try currentIndex().exactly(attributes).first : nil
        let identity: ItemIdentity
        if let existing { identity = existing.identity } else { identity = try newIdentity(for: attributes) }
        try write(
            identity: identity, label: label, attributes: attributes, contentType: contentType, secret: secret,
            isNew: existing == nil)
        guard let item = try currentIndex()[SecretItem.id(of: identity)] else {
            throw SecretServiceError(.failed, "The item was written but cannot be read back")
        }
        return (item, existing == nil)
    }

    /// Changes an item's secret, label or attributes (nil keeps each).
    func update(
        _ item: SecretItem, label: String? = nil, attributes: [String: String]? = nil,
        secret: (value: [UInt8], contentType: String)? = nil
    ) throws(SecretServiceError) -> SecretItem {
        try checkWritable()
        try write(
            identity: item.identity, label: label ?? item.label, attributes: attributes ?? item.attributes,
            contentType: secret?.contentType ?? item.contentType, secret: secret?.value, isNew: false)
        guard let updated = try currentIndex()[item.id] else { throw Self.gone(item) }
        return updated
    }

    func delete(_ item: SecretItem) throws(SecretServiceError) {
        try checkWritable()
        if let service {
            do {
                _ = try service.delete(.genericPassword, primary: AttributeList(item.identity))
            } catch {
                throw SecretServiceError(error)
            }
            fingerprint = takeFingerprint()
        } else {
            memorySecrets[item.id] = nil
        }
        index?.remove(item.id)
        modified = Self.now()
    }

    /// Renames the collection; kept in the store (a collection-properties item).
    func setLabel(_ newLabel: String) throws(SecretServiceError) {
        if let service {
            let key = propertiesItem.flatMap { $0.isProtected ? openedKeys[$0.keyRecord] : nil }
            if propertiesItem?.isProtected == true && key == nil {
                throw SecretServiceError(.isLocked, "The collection \"\(label)\" is locked: unlock it first")
            }
            do {
                try service.write(
                    .genericPassword, primary: propertiesPrimary(label: newLabel), mode: .upsert,
                    value: propertiesItem == nil ? ItemValue(kind: .data, bytes: [0]) : nil, key: key)
            } catch {
                throw SecretServiceError(error)
            }
        }
        label = newLabel
        modified = Self.now()
    }

    // MARK: The store

    private func checkWritable() throws(SecretServiceError) {
        guard !isLocked else { throw SecretServiceError(.isLocked, "The collection \"\(label)\" is locked") }
    }

    private func write(
        identity: ItemIdentity, label: String, attributes: [String: String], contentType: String, secret: [UInt8]?,
        isNew: Bool
    ) throws(SecretServiceError) {
        let stored = SecretItemMapping.storedAttributes(
            identity: identity, label: label, attributes: attributes, contentType: contentType)
        guard stored.encoded().count <= AttributeList.maximumValueSize else {
            throw SecretServiceError(.invalidArgs, "The item's attributes and label are over 64 KiB")
        }
        _ = try currentIndex()
        guard let service else {
            let id = SecretItem.id(of: identity)
            let now = Self.now()
            let old = index?[id]
            if let secret { memorySecrets[id] = (secret, contentType) }
            index?.insert(
                SecretItem(
                    id: id, identity: identity, label: label, attributes: attributes, contentType: contentType,
                    created: old?.created ?? now, modified: now, isProtected: false))
            modified = now
            return
        }
        let result: ItemQueryResult?
        do {
            let value = secret.map { ItemValue(kind: .data, bytes: $0) }
            let mode: ItemWriteMode = isNew ? .add : .update
            if let accessControl, value != nil {
                // A new secret: under the collection's access control, in its shared key record.
                try service.write(
                    .genericPassword, primary: stored, mode: mode, value: value, control: accessControl,
                    enrollment: enrollment)
            } else {
                // Attributes only: a protected item keeps its secret with its opened key.
                let old = index?[SecretItem.id(of: identity)]
                let key = old.flatMap { $0.isProtected ? openedKeys[$0.keyRecord] : nil }
                try service.write(.genericPassword, primary: stored, mode: mode, value: value, key: key)
            }
            result = try service.item(.genericPassword, primary: AttributeList(identity), withSecret: false)
        } catch {
            throw SecretServiceError(error)
        }
        guard let result, let item = SecretItemMapping.item(from: result) else {
            throw SecretServiceError(.failed, "The item was written but cannot be read back")
        }
        index?.insert(item)
        fingerprint = takeFingerprint()
        modified = Self.now()
    }

    /// A new item's store identity. Attributes naming a service and account that no item has yet
    /// become the item's own service and account, so the Keychain API and the CLI find it by them;
    /// otherwise the item gets a fresh random account under ``SecretItemMapping/itemService``.
    private func newIdentity(for attributes: [String: String]) throws(SecretServiceError) -> ItemIdentity {
        if let service = attributes["service"], let account = attributes["account"],
            service != SecretItemMapping.collectionService,
            let identity = try? ItemIdentity(accessGroup: "", service: service, account: account),
            try currentIndex()[SecretItem.id(of: identity)] == nil
        {
            return identity
        }
        var generator = SystemRandomNumberGenerator()
        let account = (0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) }.hexString
        return ItemIdentity(unchecked: "", SecretItemMapping.itemService, account)
    }

    /// The index, built at first use and rebuilt when another process changed the store.
    func currentIndex() throws(SecretServiceError) -> ItemIndex {
        guard let storePath else { return index ?? ItemIndex() }
        if let index, takeFingerprint() == fingerprint { return index }
        let results: [ItemQueryResult]
        do {
            let opened: ItemService
            if let service {
                opened = service
            } else {
                // The TPM as the library chooses it for every process (the store's own simulator
                // only while a command needs it), so the CLI and other processes share the store.
                opened = try ItemService(
                    location: try KeychainLocation(path: storePath), caller: AccessCaller(face: .secretService))
                service = opened
            }
            fingerprint = takeFingerprint()
            results = try opened.query(.genericPassword, matching: AttributeList())
        } catch {
            throw SecretServiceError(error)
        }
        var items: [SecretItem] = []
        items.reserveCapacity(results.count)
        propertiesItem = nil
        accessControl = nil
        allowedExecutables = nil
        confirmsEachAccess = false
        for result in results {
            if let item = SecretItemMapping.item(from: result) {
                items.append(item)
            } else {
                propertiesItem = result
                if let storedLabel = result.attributes.string(AttributeTag.label) { label = storedLabel }
                accessControl = try? service?.accessControl(of: result)
                confirmsEachAccess = result.attributes.bool(SecretItemMapping.confirmEachAccessTag) ?? false
                allowedExecutables = result.attributes[SecretItemMapping.allowedExecutablesTag]
                    .flatMap(SecretItemMapping.decode).map { $0.keys.sorted() }
            }
        }
        let built = ItemIndex(items)
        index = built
        return built
    }

    /// The collection's grants (none for a collection in memory).
    func grants() throws(SecretServiceError) -> [Grant] {
        try policy()?.grants ?? []
    }

    /// The collection's policy for the decision point (its grants, whether it keeps a trail);
    /// nil for a collection in memory.
    func policy() throws(SecretServiceError) -> StorePolicy? {
        do {
            return try service?.policy()
        } catch {
            throw SecretServiceError(error)
        }
    }

    /// The collection's store, opened if nothing opened it yet; nil for a collection in memory.
    func openedService() throws(SecretServiceError) -> ItemService? {
        _ = try currentIndex()
        return service
    }

    /// Whether the collection's store keeps an audit trail (none in memory).
    func keepsAuditTrail() -> Bool {
        service?.keepsAuditTrail() ?? false
    }

    /// Appends to the collection's audit trail.
    func audit(_ line: String) throws(SecretServiceError) {
        do {
            try service?.audit(line)
        } catch {
            throw SecretServiceError(error)
        }
    }

    /// Records a grant the person gave at a prompt.
    func addGrant(_ grant: Grant) throws(SecretServiceError) {
        guard let service else {
            throw SecretServiceError(.failed, "The collection \"\(label)\" lives in memory: it keeps no grants")
        }
        do {
            try service.addGrant(grant)
        } catch {
            throw SecretServiceError(error)
        }
    }

    /// Uses up a grant for one use that allowed a call.
    func useUp(_ grant: Grant) throws(SecretServiceError) {
        do {
            try service?.useUp(grant)
        } catch {
            throw SecretServiceError(error)
        }
    }

    private func takeFingerprint() -> [Int64] {
        service?.changeStamp() ?? []
    }

    private static func modificationTime(_ path: String) -> Int64 {
        var status = stat()
        guard stat(path, &status) == 0 else { return 0 }
        return Int64(status.st_mtim.tv_sec) * 1_000_000_000 + Int64(status.st_mtim.tv_nsec)
    }

    private static func gone(_ item: SecretItem) -> SecretServiceError {
        SecretServiceError(.noSuchObject, "The item \"\(item.label)\" no longer exists")
    }

    static func now() -> UInt64 { UInt64(Date().timeIntervalSince1970) }
}

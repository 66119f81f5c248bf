import DBus
import FoundationEssentials
import SystemCalls
import TPMKeychain

#if canImport(Glibc)
import Glibc
#endif

/// What the daemon serves, over the stores of one data directory, kept in one place and used on
/// the daemon's loop thread only (sd-bus connections are single-threaded, and so is this state):
/// the collections (each a TPMKeychain store; `session` lives in memory), aliases, sessions,
/// prompts, and the callers seen.
///
/// Every call comes through ``handle(_:)``: its caller is identified once per connection and only
/// the daemon's own user (``BusPeer/uid``) gets further; its path names one object, and the call
/// goes to that object's type (``ServiceObject``, ``CollectionObject``, ``ItemObject``,
/// ``SessionObject``, ``PromptObject``), which answers its interface's methods and properties and
/// asks ``authorize(_:_:for:)`` before it touches a collection.
final class SecretServiceRegistry {
    /// The aliases' file in the data directory (``Aliases``).
    static let aliasesFileName = ".secret-service-aliases"
    let connection: BusConnection
    let dataDirectory: String
    let audit: AuditLog?
    let ownUID = geteuid()
    /// By collection ID (path element).
    var collections: [String: SecretCollection] = [:]
    var aliases: Aliases
    var sessions = SessionTable()
    private var nextObjectNumber = 0
    /// The data directory's modification time at the last listing.
    private var dataDirectoryTime: Int64 = 0
    /// Callers seen, by unique name (dbus-daemon never reuses one); forgotten when they leave.
    var peers: [String: BusPeer] = [:]
    var prompts: [String: PendingPrompt] = [:]
    /// Confirmations given and not yet used, by caller: the collections (by ID) whose secrets the
    /// caller's next read may return (confirm-each-access collections).
    var confirmations: [String: Set<String>] = [:]
    /// What each caller said its last search was for (``takePurpose(from:of:)``): shown in its
    /// prompts and kept with a remembered answer's grant; never decided on.
    var purposes: [String: String] = [:]
    let confirm: (@Sendable (String) async -> Confirmation)?
    /// The login session's lock state at the last look (``followSessionLock(_:)``).
    var sessionWasLocked = false
    /// When each collection's `Items` value next goes out (``itemsChanged(in:)``).
    var itemsSignals = ItemsSignalSchedule()
    /// Written by prompts' tasks, read on the loop after ``wakeup``.
    let promptOutcomes = Locked<[PromptOutcome]>([])
    let wakeup: Wakeup
    let authenticator: (any Authenticator)?
    let passcode: PasscodeSource?
    /// The TPM a new collection's store is created on (simulated only when allowed).
    let newStoreTPM: TPMChoice

    init(
        connection: BusConnection, dataDirectory: String, audit: AuditLog?, authenticator: (any Authenticator)?,
        passcode: PasscodeSource?, confirm: (@Sendable (String) async -> Confirmation)?, newStoreTPM: TPMChoice,
        wakeup: Wakeup
    ) {
        self.confirm = confirm
        self.newStoreTPM = newStoreTPM
        self.connection = connection
        self.dataDirectory = dataDirectory
        self.audit = audit
        self.authenticator = authenticator
        self.passcode = passcode
        self.wakeup = wakeup
        aliases = Aliases(file: dataDirectory + "/" + Self.aliasesFileName)
        let session = SecretCollection(memoryNamed: SecretCollection.sessionName, label: "Session")
        collections[session.id] = session
        refreshCollections()
    }

    /// Closes every store (keys erased, simulated TPMs stopped).
    func close() {
        for collection in collections.values { collection.close() }
    }

    /// Picks up stores created (or removed) by other processes since the last look: a listing of
    /// the data directory, only when its modification time moved.
    /// - Parameter force: list even when the time did not move (a name was asked for and not found).
    func refreshCollections(force: Bool = false) {
        var status = stat()
        let time =
            stat(dataDirectory, &status) == 0
            ? Int64(status.st_mtim.tv_sec) * 1_000_000_000 + Int64(status.st_mtim.tv_nsec) : -1
        guard force || time != dataDirectoryTime || time == -1 else { return }
        dataDirectoryTime = time
        let names = Set(KeychainLocation.storeNames(in: dataDirectory))
        for name in names where collections[ObjectPaths.element(for: name)] == nil {
            let collection = SecretCollection(name: name, storePath: dataDirectory + "/" + name)
            collections[collection.id] = collection
        }
        for (id, collection) in collections where !collection.isInMemory && !names.contains(collection.name) {
            collection.close()
            collections[id] = nil
        }
    }

    /// A collection created here (CreateCollection) joins the others.
    func add(_ collection: SecretCollection) {
        collections[collection.id] = collection
    }

    /// A collection deleted here leaves everything that named it: the list, its pending `Items`
    /// value, the aliases.
    func remove(_ collection: SecretCollection) {
        collections[collection.id] = nil
        itemsSignals.forget(collection.id)
        aliases.forget(collection)
    }

    /// A fresh object path under `prefix` (sessions, prompts).
    func newObjectPath(_ prefix: String) -> String {
        nextObjectNumber += 1
        return prefix + String(nextObjectNumber)
    }

    /// A caller left the bus: its sessions end with it, and so do its prompts, without a Completed
    /// signal (no one is left to hear it); an authentication still running is cancelled, so
    /// nothing is unlocked by them.
    func forget(_ uniqueName: String) {
        peers[uniqueName] = nil
        sessions.forget(owner: uniqueName)
        confirmations[uniqueName] = nil
        purposes[uniqueName] = nil
        for (path, prompt) in prompts where prompt.owner == uniqueName {
            prompt.task?.cancel()
            prompts[path] = nil
        }
    }

    // MARK: Routing

    /// Answers one method call.
    func handle(_ call: BusMethodCall) -> BusReply {
        do throws(SecretServiceError) {
            let peer = try identify(call.sender)
            return .values(try route(call, from: peer))
        } catch {
            return error.reply
        }
    }

    /// The caller, identified once per connection; only the daemon's own user gets further.
    func identify(_ sender: String) throws(SecretServiceError) -> BusPeer {
        if let known = peers[sender] { return try check(known) }
        let peer: BusPeer
        do {
            peer = try connection.peer(sender)
        } catch {
            throw SecretServiceError(.accessDenied, "The caller could not be identified: \(error.message)")
        }
        peers[sender] = peer
        return try check(peer)
    }

    /// The decision point's first rule, for every call: only the daemon's own user.
    private func check(_ peer: BusPeer) throws(SecretServiceError) -> BusPeer {
        do throws(AccessRefusal) {
            try AccessDecision.decide(.readMetadata, by: peer.caller, on: AccessTarget(owner: ownUID))
        } catch {
            throw SecretServiceError(
                .accessDenied, "This Secret Service belongs to uid \(ownUID); calls from uid \(peer.uid) are refused")
        }
        return peer
    }

    /// The standard interfaces every object has are answered alike (the object gives its
    /// properties and introspection data); any other call is the object's own.
    private func route(_ call: BusMethodCall, from peer: BusPeer) throws(SecretServiceError) -> [BusValue] {
        let object = object(at: call.path)
        switch call.interface {
        case Introspection.introspectableInterface:
            guard call.member == "Introspect" else { throw call.unknownMethod }
            return [.string(try object.introspect())]
        case Introspection.propertiesInterface:
            return try object.answerProperties(call, from: peer)
        case Introspection.peerInterface:
            return []
        default:
            return try object.call(call, from: peer)
        }
    }

    /// The object `path` names. What stands behind it (a collection, a session) is looked up by
    /// the object as each of its calls needs it, since the errors a client sees depend on that
    /// order (an unknown interface before a missing collection, for properties).
    private func object(at path: String) -> any SecretServiceObject {
        switch ObjectPaths.target(of: path) {
        case .service: ServiceObject(registry: self)
        case .collection(let id, let alias): CollectionObject(registry: self, id: id, alias: alias)
        case .item(let id, let collectionID, let alias):
            ItemObject(registry: self, id: id, collectionID: collectionID, alias: alias)
        case .session(let path): SessionObject(registry: self, path: path)
        case .prompt(let path): PromptObject(registry: self, path: path)
        case .directory(let name): DirectoryObject(registry: self, name: name)
        case .unknown: NoObject(path: path)
        }
    }

    // MARK: Finding objects

    /// The collection an ID or alias names.
    func collection(_ idOrAlias: String, alias: Bool) throws(SecretServiceError) -> SecretCollection {
        let id = alias ? aliases.collectionID(for: idOrAlias, among: collections) : idOrAlias
        if let id, let found = collections[id] { return found }
        refreshCollections(force: true)
        if let id = alias ? aliases.collectionID(for: idOrAlias, among: collections) : idOrAlias,
            let found = collections[id]
        {
            return found
        }
        throw SecretServiceError(.noSuchObject, "No collection \(alias ? "aliased " : "")\"\(idOrAlias)\"")
    }

    func item(_ id: String, in collection: SecretCollection) throws(SecretServiceError) -> SecretItem {
        guard let found = try collection.item(id) else {
            throw SecretServiceError(.noSuchObject, "No item \(id) in the collection \"\(collection.label)\"")
        }
        return found
    }

    /// The collection and item an object path names (for the service's methods, which take paths).
    func resolve(_ path: String) throws(SecretServiceError) -> (SecretCollection, SecretItem?) {
        switch ObjectPaths.target(of: path) {
        case .collection(let id, let alias):
            return (try collection(id, alias: alias), nil)
        case .item(let id, let collectionID, let alias):
            let collection = try collection(collectionID, alias: alias)
            return (collection, try item(id, in: collection))
        default:
            throw SecretServiceError(.noSuchObject, "\(path) is not a collection or an item")
        }
    }

    func sortedCollections() -> [SecretCollection] {
        refreshCollections()
        return collections.values.sorted { $0.name < $1.name }
    }

    /// The service's `Collections` value.
    func collectionPaths() -> BusValue {
        .objectPaths(sortedCollections().map(\.path))
    }

    // MARK: Confirmations

    /// Whether `collection` is locked for `caller`: locked, or it confirms each access and the
    /// caller holds no confirmation for it.
    func isLocked(_ collection: SecretCollection, for peer: BusPeer, item: SecretItem? = nil) -> Bool {
        guard awaitsConfirmation(collection, from: peer.sender, item: item) else { return false }
        // A grant that allows the caller is the person's answer, remembered: asked of the
        // decision point, as a read would be.
        return collection.isLocked || !isGranted(collection, to: peer)
    }

    /// Locked, or a confirm-each-access collection whose next read by `caller` nobody confirmed.
    ///
    /// A confirmation is the person's yes to one Unlock: for the items it named (kept as
    /// ``confirmationKey(_:_:)``), or, for an Unlock of the collection itself, for a read of any.
    func awaitsConfirmation(_ collection: SecretCollection, from caller: String, item: SecretItem? = nil) -> Bool {
        if collection.isLocked { return true }
        guard collection.confirmsEachAccess else { return false }
        let held = confirmations[caller] ?? []
        if held.contains(collection.id) { return false }
        if let item, held.contains(Self.confirmationKey(collection, item)) { return false }
        return true
    }

    /// The search attribute a client may add to say why it asks (`secret-tool lookup service S
    /// account A tpm-keychain:purpose "push to origin"`): taken out of the search, which it
    /// would otherwise match against nothing, and kept for the caller's next prompt.
    static let purposeAttribute = "tpm-keychain:purpose"

    /// The search attributes without the purpose, which is kept for `caller`.
    func takePurpose(from attributes: [String: String], of caller: String) -> [String: String] {
        guard let purpose = attributes[Self.purposeAttribute] else { return attributes }
        purposes[caller] = String(purpose.prefix(200))
        var rest = attributes
        rest[Self.purposeAttribute] = nil
        return rest
    }

    /// What a confirmation of one item of a collection is kept as.
    static func confirmationKey(_ collection: SecretCollection, _ item: SecretItem) -> String {
        collection.id + "/" + item.id
    }

    /// A read used the caller's confirmation for `collection`: the next read asks again.
    func useConfirmation(of collection: SecretCollection, item: SecretItem?, by caller: String) {
        guard collection.confirmsEachAccess else { return }
        if let item, confirmations[caller]?.remove(Self.confirmationKey(collection, item)) != nil { return }
        confirmations[caller]?.remove(collection.id)
    }
}

/// How many sessions, and prompts, one connection may hold at once: far above what a client uses
/// (libsecret and secretstorage open one session each), low enough that a connection cannot grow
/// the daemon without bound.
enum ConnectionLimits {
    static let sessions = 64
    static let prompts = 16

    /// Refuses a connection that already holds `limit` of the objects `held` counts.
    static func check(_ held: Int, _ limit: Int, of what: String) throws(SecretServiceError) {
        guard held < limit else {
            throw SecretServiceError(
                .limitsExceeded, "This connection holds \(held) \(what), the most one may: close some first")
        }
    }
}

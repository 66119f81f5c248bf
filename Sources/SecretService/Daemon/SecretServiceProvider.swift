import DBus
import Foundation
import SystemCalls
import TPMKeychain

#if canImport(Glibc)
import Glibc
#endif

/// The Secret Service over the stores of one data directory: every object the specification
/// defines, answered on the daemon's loop thread (sd-bus connections are single-threaded, and so
/// is this state). Each collection is a TPMKeychain store; `session` lives in memory.
///
/// Every call is checked first: only the daemon's own user may call it (``BusPeer/uid``), and a
/// session or prompt answers only the connection that opened it.
final class SecretServiceProvider {
    let connection: BusConnection
    let dataDirectory: String
    let audit: AuditLog?
    let ownUID = geteuid()
    /// By collection ID (path element).
    var collections: [String: SecretCollection] = [:]
    var aliases: Aliases
    var sessions: [String: TransferSession] = [:]
    private var nextObjectNumber = 0
    /// The data directory's modification time at the last listing.
    private var dataDirectoryTime: Int64 = 0
    /// Callers seen, by unique name (dbus-daemon never reuses one); forgotten when they leave.
    var peers: [String: BusPeer] = [:]
    var prompts: [String: PendingPrompt] = [:]
    /// Confirmations given and not yet used, by caller: the collections (by ID) whose secrets the
    /// caller's next read may return (confirm-each-access collections).
    var confirmations: [String: Set<String>] = [:]
    let confirm: (@Sendable (String) async -> Bool)?
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
        passcode: PasscodeSource?, confirm: (@Sendable (String) async -> Bool)?, newStoreTPM: TPMChoice,
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
        aliases = Aliases(file: dataDirectory + "/.secret-service-aliases")
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

    /// A fresh object path under `prefix` (sessions, prompts).
    func newObjectPath(_ prefix: String) -> String {
        nextObjectNumber += 1
        return prefix + String(nextObjectNumber)
    }

    /// A caller left the bus: its sessions end with it.
    func forget(_ uniqueName: String) {
        peers[uniqueName] = nil
        sessions = sessions.filter { $0.value.owner != uniqueName }
        confirmations[uniqueName] = nil
        forgetPrompts(of: uniqueName)
    }

    // MARK: Dispatch

    /// Answers one method call.
    func handle(_ call: BusMethodCall) -> BusReply {
        do throws(SecretServiceError) {
            let peer = try identify(call.sender)
            return .values(try dispatch(call, from: peer))
        } catch {
            return error.reply
        }
    }

    /// The caller, identified once per connection; only the daemon's own user gets further.
    private func identify(_ sender: String) throws(SecretServiceError) -> BusPeer {
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

    private func dispatch(_ call: BusMethodCall, from peer: BusPeer) throws(SecretServiceError) -> [BusValue] {
        let target = ObjectPaths.target(of: call.path)
        switch call.interface {
        case Introspection.introspectableInterface:
            guard call.member == "Introspect" else { throw Self.unknownMethod(call) }
            return [.string(try introspect(target))]
        case Introspection.propertiesInterface:
            return try properties(call, target: target, peer: peer)
        case Introspection.peerInterface:
            return []
        default:
            break
        }
        switch target {
        case .service:
            return try serviceMethod(call, peer: peer)
        case .collection(let id, let alias):
            return try collectionMethod(call, collection: try collection(id, alias: alias), peer: peer)
        case .item(let id, let collectionID, let alias):
            let collection = try collection(collectionID, alias: alias)
            return try itemMethod(call, item: try item(id, in: collection), in: collection, peer: peer)
        case .session(let path):
            guard call.member == "Close", call.interface.isEmpty || call.interface == Introspection.sessionInterface
            else { throw Self.unknownMethod(call) }
            guard let session = sessions[path], session.owner == call.sender else {
                throw SecretServiceError(.noSuchObject, "No session \(path) of this connection")
            }
            sessions[session.path] = nil
            return []
        case .prompt(let path):
            return try promptMethod(call, path: path)
        case .directory:
            throw Self.unknownMethod(call)
        case .unknown:
            throw SecretServiceError(.unknownObject, "No object at \(call.path)")
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

    /// The session `path` names, if `sender` opened it.
    func session(_ path: String, of sender: String) throws(SecretServiceError) -> TransferSession {
        guard let session = sessions[path], session.owner == sender else {
            throw SecretServiceError(.noSession, "No session \(path) opened by this connection; call OpenSession")
        }
        return session
    }

    func itemPath(_ item: SecretItem, in collection: SecretCollection) -> String {
        ObjectPaths.item(item.id, in: collection.id)
    }

    /// Whether `collection` is locked for `caller`: locked, or it confirms each access and the
    /// caller holds no confirmation for it.
    func isLocked(_ collection: SecretCollection, for caller: String) -> Bool {
        collection.isLocked
            || (collection.confirmsEachAccess && confirmations[caller]?.contains(collection.id) != true)
    }

    /// A read used the caller's confirmation for `collection`: the next read asks again.
    func useConfirmation(of collection: SecretCollection, by caller: String) {
        guard collection.confirmsEachAccess else { return }
        confirmations[caller]?.remove(collection.id)
    }

    /// The `(oayays)` secret struct for `item`, encrypted for `session`.
    func secretStruct(
        of item: SecretItem, in collection: SecretCollection, session: TransferSession, peer: BusPeer
    ) throws(SecretServiceError) -> BusValue {
        try authorize(.readSecret, collection, for: peer)
        let (secret, contentType) = try collection.secret(of: item)
        audit?.record(peer: peer, action: "read", collection: collection.label, item: item.label)
        let (parameters, value) = try session.encrypt(secret)
        return .structure([.objectPath(session.path), .bytes(parameters), .bytes(value), .string(contentType)])
    }

    /// A secret struct from a client: its bytes, decrypted with the session it names, and content type.
    func secret(
        from value: BusValue, sender: String
    ) throws(SecretServiceError) -> (value: [UInt8], contentType: String) {
        guard let fields = value.fields, fields.count == 4, let sessionPath = fields[0].objectPath,
            let parameters = fields[1].byteArray, let bytes = fields[2].byteArray, let contentType = fields[3].string
        else {
            throw SecretServiceError(.invalidArgs, "A secret is (oayays): session, parameters, value, content type")
        }
        let session = try session(sessionPath, of: sender)
        return (try session.decrypt(parameters: parameters, value: bytes), contentType)
    }

    func emit(_ path: String, _ interface: String, _ member: String, _ values: [BusValue]) {
        // A signal that cannot be queued (out of memory) is lost; the call itself has succeeded.
        try? connection.emit(path: path, interface: interface, member: member, values: values)
    }

    static func unknownMethod(_ call: BusMethodCall) -> SecretServiceError {
        SecretServiceError(
            .unknownMethod,
            "No method \(call.interface.isEmpty ? "" : call.interface + ".")\(call.member)(\(call.signature)) at \(call.path)"
        )
    }

    /// A property given as a string, or nil when it is not given.
    ///
    /// - Throws: ``SecretServiceError`` `.invalidArgs` when it is given as anything else.
    static func string(_ property: BusValue?, named name: String) throws(SecretServiceError) -> String? {
        guard let property else { return nil }
        guard let text = property.unwrapped.string else {
            throw SecretServiceError(.invalidArgs, "\(name) is a string")
        }
        return text
    }

    /// How many sessions, and prompts, one connection may hold at once: far above what a client
    /// uses (libsecret and secretstorage open one session each), low enough that a connection
    /// cannot grow the daemon without bound.
    static let sessionsPerConnection = 64
    static let promptsPerConnection = 16

    /// Refuses a connection that already holds `limit` of the objects `held` counts.
    static func checkLimit(
        _ held: Int, _ limit: Int, of what: String
    ) throws(SecretServiceError) {
        guard held < limit else {
            throw SecretServiceError(
                .limitsExceeded, "This connection holds \(held) \(what), the most one may: close some first")
        }
    }

    /// Checks a call's signature before its arguments are used.
    static func expect(_ call: BusMethodCall, _ signature: String) throws(SecretServiceError) {
        guard call.signature == signature else {
            throw SecretServiceError(
                .invalidArgs, "\(call.member) takes (\(signature)), not (\(call.signature))")
        }
    }
}

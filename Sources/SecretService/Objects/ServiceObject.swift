import DBus
import TPMKeychain

/// org.freedesktop.Secret.Service at `/org/freedesktop/secrets`: sessions, collections, search,
/// locking, bulk secrets, aliases. Its methods take object paths, so each names the collections it
/// touches to ``SecretServiceRegistry/authorize(_:_:for:)`` before it acts.
struct ServiceObject: SecretServiceObject {
    let registry: SecretServiceRegistry

    func call(_ call: BusMethodCall, from peer: BusPeer) throws(SecretServiceError) -> [BusValue] {
        guard call.isFor(Introspection.serviceInterface) else { throw call.unknownMethod }
        let arguments = call.arguments
        switch call.member {
        case "OpenSession":
            try call.requireSignature("sv")
            return try openSession(
                algorithm: arguments[0].string ?? "", input: arguments[1].unwrapped, owner: call.sender)
        case "CreateCollection":
            try call.requireSignature("a{sv}s")
            return try createCollection(properties: arguments[0].dictionary ?? [:], alias: arguments[1].string ?? "")
        case "SearchItems":
            try call.requireSignature("a{ss}")
            return try searchItems(
                registry.takePurpose(from: arguments[0].stringDictionary ?? [:], of: call.sender), peer: peer)
        case "Unlock":
            try call.requireSignature("ao")
            return try unlock(arguments[0].objectPathArray ?? [], peer: peer)
        case "Lock":
            try call.requireSignature("ao")
            return try lock(arguments[0].objectPathArray ?? [], peer: peer)
        case "GetSecrets":
            try call.requireSignature("aoo")
            return try secrets(
                of: arguments[0].objectPathArray ?? [], session: arguments[1].objectPath ?? "", peer: peer)
        case "ReadAlias":
            try call.requireSignature("s")
            return try readAlias(arguments[0].string ?? "", peer: peer)
        case "SetAlias":
            try call.requireSignature("so")
            try setAlias(arguments[0].string ?? "", to: arguments[1].objectPath ?? ObjectPaths.none, peer: peer)
            return []
        default:
            throw call.unknownMethod
        }
    }

    func properties(of interface: String, for peer: BusPeer) throws(SecretServiceError) -> [(String, BusValue)] {
        try Self.requireInterface(interface, is: Introspection.serviceInterface)
        return [("Collections", registry.collectionPaths())]
    }

    func introspect() -> String {
        Introspection.document(
            interfaces: [Introspection.serviceInterface], children: ["collection", "aliases", "session", "prompt"])
    }

    private func openSession(
        algorithm: String, input: BusValue, owner: String
    ) throws(SecretServiceError) -> [BusValue] {
        try ConnectionLimits.check(registry.sessions.count(of: owner), ConnectionLimits.sessions, of: "sessions")
        let path = registry.newObjectPath(ObjectPaths.sessionPrefix)
        let (output, session) = try SessionObject.negotiate(
            algorithm: algorithm, input: input, path: path, owner: owner)
        registry.sessions.add(session)
        return [.variant(output), .objectPath(path)]
    }

    /// Every collection's matches, unlocked ones apart from locked ones (for this caller).
    private func searchItems(
        _ attributes: [String: String], peer: BusPeer
    ) throws(SecretServiceError) -> [BusValue] {
        var unlocked: [String] = []
        var locked: [String] = []
        for collection in registry.sortedCollections() {
            try registry.authorize(.readMetadata, collection, for: peer)
            for item in try collection.search(attributes) {
                let path = ItemObject.path(of: item, in: collection)
                if registry.isLocked(collection, for: peer, item: item) {
                    locked.append(path)
                } else {
                    unlocked.append(path)
                }
            }
        }
        return [.objectPaths(unlocked), .objectPaths(locked)]
    }

    /// Unlocks collections (and the collections of items). A collection without access control
    /// unlocks at once; the others wait for a prompt, whose path is returned.
    private func unlock(_ paths: [String], peer: BusPeer) throws(SecretServiceError) -> [BusValue] {
        let caller = peer.sender
        let resolved = try paths.map { (path) throws(SecretServiceError) in try registry.resolve(path) }
        for (collection, _) in resolved { try registry.authorize(.unlock, collection, for: peer) }
        var unlocked: [String] = []
        var waiting: [SecretCollection] = []
        var waitingPaths: [String] = []
        for (path, (collection, item)) in zip(paths, resolved) {
            if !registry.isLocked(collection, for: peer, item: item) {
                unlocked.append(path)
            } else if (!collection.isLocked || collection.unlockWithoutPrompt())
                && !registry.isLocked(collection, for: peer, item: item)
            {
                registry.emitCollectionChanged(collection)
                unlocked.append(path)
            } else {
                if !waiting.contains(where: { $0 === collection }) { waiting.append(collection) }
                waitingPaths.append(path)
            }
        }
        guard !waiting.isEmpty else { return [.objectPaths(unlocked), .objectPath(ObjectPaths.none)] }
        try ConnectionLimits.check(
            registry.prompts.values.count { $0.owner == caller }, ConnectionLimits.prompts, of: "prompts")
        let prompt = PromptObject.open(unlocking: waiting, paths: waitingPaths, for: caller, in: registry)
        return [.objectPaths(unlocked), .objectPath(prompt)]
    }

    private func lock(_ paths: [String], peer: BusPeer) throws(SecretServiceError) -> [BusValue] {
        // Every collection is decided before any is locked: a refusal changes nothing.
        let targets = try paths.map { (path) throws(SecretServiceError) in try registry.resolve(path).0 }
        for collection in targets { try registry.authorize(.lock, collection, for: peer) }
        var locked: [String] = []
        for (path, collection) in zip(paths, targets) {
            let wasLocked = collection.isLocked
            collection.lock()
            if !wasLocked { registry.emitCollectionChanged(collection) }
            locked.append(path)
        }
        return [.objectPaths(locked), .objectPath(ObjectPaths.none)]
    }

    private func secrets(
        of paths: [String], session sessionPath: String, peer: BusPeer
    ) throws(SecretServiceError) -> [BusValue] {
        let session = try registry.sessions.session(sessionPath, of: peer.sender)
        var entries: [BusValue] = []
        for path in paths {
            let (collection, item) = try registry.resolve(path)
            guard let item else { continue }
            do {
                let secret = try ItemObject.secret(
                    of: item, in: collection, for: session, peer: peer, registry: registry)
                entries.append(.dictionaryEntry(.objectPath(path), secret))
            } catch  where error.name == .isLocked {
                // Locked items are left out, as the specification says; the caller unlocks first.
                continue
            }
        }
        // One confirmation covers one read call, with every item it names.
        for path in paths {
            if let (collection, item) = try? registry.resolve(path) {
                registry.useConfirmation(of: collection, item: item, by: peer.sender)
            }
        }
        return [.array(element: "{o(oayays)}", entries)]
    }

    private func readAlias(_ name: String, peer: BusPeer) throws(SecretServiceError) -> [BusValue] {
        let id = registry.aliases.collectionID(for: name, among: registry.collections)
        guard let collection = id.flatMap({ registry.collections[$0] }) else {
            return [.objectPath(ObjectPaths.none)]
        }
        try registry.authorize(.readMetadata, collection, for: peer)
        return [.objectPath(collection.path)]
    }

    private func setAlias(_ name: String, to target: String, peer: BusPeer) throws(SecretServiceError) {
        var newCollection: SecretCollection?
        if target != ObjectPaths.none {
            let (collection, item) = try registry.resolve(target)
            guard item == nil else { throw SecretServiceError(.invalidArgs, "An alias names a collection") }
            newCollection = collection
        }
        // Re-pointing changes what both collections stand for (where clients of "default"
        // write): the caller must be allowed to change each, and each must be unlocked.
        if let id = registry.aliases.collectionID(for: name, among: registry.collections),
            let current = registry.collections[id]
        {
            try registry.authorize(.repoint, current, for: peer)
        }
        if let newCollection { try registry.authorize(.repoint, newCollection, for: peer) }
        try registry.aliases.set(name, to: newCollection)
    }
}

import DBus
import Foundation
import TPMKeychain

// org.freedesktop.Secret.Service: sessions, collections, search, locking, bulk secrets, aliases.
extension SecretServiceProvider {
    func serviceMethod(_ call: BusMethodCall, peer: BusPeer) throws(SecretServiceError) -> [BusValue] {
        guard call.interface.isEmpty || call.interface == Introspection.serviceInterface else {
            throw Self.unknownMethod(call)
        }
        let arguments = call.arguments
        switch call.member {
        case "OpenSession":
            try Self.expect(call, "sv")
            return try openSession(
                algorithm: arguments[0].string ?? "", input: arguments[1].unwrapped, owner: call.sender)
        case "CreateCollection":
            try Self.expect(call, "a{sv}s")
            return try createCollection(properties: arguments[0].dictionary ?? [:], alias: arguments[1].string ?? "")
        case "SearchItems":
            try Self.expect(call, "a{ss}")
            var unlocked: [String] = []
            var locked: [String] = []
            for collection in sortedCollections() {
                try authorize(.readMetadata, collection, for: peer)
                let found = try collection.search(arguments[0].stringDictionary ?? [:])
                let paths = found.map { itemPath($0, in: collection) }
                if isLocked(collection, for: call.sender) { locked += paths } else { unlocked += paths }
            }
            return [.objectPaths(unlocked), .objectPaths(locked)]
        case "Unlock":
            try Self.expect(call, "ao")
            return try unlock(arguments[0].objectPathArray ?? [], peer: peer)
        case "Lock":
            try Self.expect(call, "ao")
            let paths = arguments[0].objectPathArray ?? []
            // Every collection is decided before any is locked: a refusal changes nothing.
            let targets = try paths.map { (path) throws(SecretServiceError) in try resolve(path).0 }
            for collection in targets { try authorize(.lock, collection, for: peer) }
            var locked: [String] = []
            for (path, collection) in zip(paths, targets) {
                let wasLocked = collection.isLocked
                collection.lock()
                if !wasLocked { emitCollectionChanged(collection) }
                locked.append(path)
            }
            return [.objectPaths(locked), .objectPath(ObjectPaths.none)]
        case "GetSecrets":
            try Self.expect(call, "aoo")
            let session = try session(arguments[1].objectPath ?? "", of: call.sender)
            var entries: [BusValue] = []
            for path in arguments[0].objectPathArray ?? [] {
                let (collection, item) = try resolve(path)
                guard let item else { continue }
                do {
                    let secret = try secretStruct(of: item, in: collection, session: session, peer: peer)
                    entries.append(.dictionaryEntry(.objectPath(path), secret))
                } catch  where error.name == .isLocked {
                    // Locked items are left out, as the specification says; the caller unlocks first.
                    continue
                }
            }
            // One confirmation covers one read call, with every item it names.
            for path in arguments[0].objectPathArray ?? [] {
                if let (collection, _) = try? resolve(path) { useConfirmation(of: collection, by: call.sender) }
            }
            return [.array(element: "{o(oayays)}", entries)]
        case "ReadAlias":
            try Self.expect(call, "s")
            let id = aliases.collectionID(for: arguments[0].string ?? "", among: collections)
            guard let collection = id.flatMap({ collections[$0] }) else { return [.objectPath(ObjectPaths.none)] }
            try authorize(.readMetadata, collection, for: peer)
            return [.objectPath(collection.path)]
        case "SetAlias":
            try Self.expect(call, "so")
            let name = arguments[0].string ?? ""
            let target = arguments[1].objectPath ?? ObjectPaths.none
            var newCollection: SecretCollection?
            if target != ObjectPaths.none {
                let (collection, item) = try resolve(target)
                guard item == nil else { throw SecretServiceError(.invalidArgs, "An alias names a collection") }
                newCollection = collection
            }
            // Re-pointing changes what both collections stand for (where clients of "default"
            // write): the caller must be allowed to change each, and each must be unlocked.
            if let id = aliases.collectionID(for: name, among: collections), let current = collections[id] {
                try authorize(.repoint, current, for: peer)
            }
            if let newCollection { try authorize(.repoint, newCollection, for: peer) }
            try aliases.set(name, to: newCollection)
            return []
        default:
            throw Self.unknownMethod(call)
        }
    }

    private func openSession(algorithm: String, input: BusValue, owner: String) throws(SecretServiceError) -> [BusValue]
    {
        try Self.checkLimit(sessions.values.count { $0.owner == owner }, Self.sessionsPerConnection, of: "sessions")
        let path = newObjectPath(ObjectPaths.sessionPrefix)
        switch algorithm {
        case TransferSession.plainName:
            sessions[path] = TransferSession(path: path, owner: owner, algorithm: .plain)
            return [.variant(.string("")), .objectPath(path)]
        case TransferSession.diffieHellmanName:
            guard let clientPublic = input.byteArray else {
                throw SecretServiceError(.invalidArgs, "\(algorithm) takes the client's public value as ay")
            }
            let (ourPublic, key) = try DiffieHellmanGroup2.agree(clientPublic: clientPublic)
            sessions[path] = TransferSession(path: path, owner: owner, algorithm: .diffieHellman(key))
            return [.variant(.bytes(ourPublic)), .objectPath(path)]
        default:
            throw SecretServiceError(
                .notSupported,
                "The algorithm \"\(algorithm)\" is not supported; use \(TransferSession.plainName) or \(TransferSession.diffieHellmanName)"
            )
        }
    }

    /// Unlocks collections (and the collections of items). A collection without access control
    /// unlocks at once; the others wait for a prompt, whose path is returned.
    private func unlock(_ paths: [String], peer: BusPeer) throws(SecretServiceError) -> [BusValue] {
        let caller = peer.sender
        let targets = try paths.map { (path) throws(SecretServiceError) in try resolve(path).0 }
        for collection in targets { try authorize(.unlock, collection, for: peer) }
        var unlocked: [String] = []
        var waiting: [SecretCollection] = []
        var waitingPaths: [String] = []
        for (path, collection) in zip(paths, targets) {
            if !isLocked(collection, for: caller) {
                unlocked.append(path)
            } else if (!collection.isLocked || collection.unlockWithoutPrompt()) && !isLocked(collection, for: caller) {
                emitCollectionChanged(collection)
                unlocked.append(path)
            } else {
                if !waiting.contains(where: { $0 === collection }) { waiting.append(collection) }
                waitingPaths.append(path)
            }
        }
        guard !waiting.isEmpty else { return [.objectPaths(unlocked), .objectPath(ObjectPaths.none)] }
        try Self.checkLimit(prompts.values.count { $0.owner == caller }, Self.promptsPerConnection, of: "prompts")
        return [
            .objectPaths(unlocked), .objectPath(newUnlockPrompt(for: waiting, paths: waitingPaths, caller: caller)),
        ]
    }

    /// Creates the collection "default" names, the store `default` (the Keychain API's and the
    /// CLI's), unless it exists or the alias was removed: clients expect a default collection.
    func ensureDefaultCollection() throws(SecretServiceError) {
        guard aliases.collectionID(for: "default", among: collections) == nil, !aliases.wasRemoved("default") else {
            return
        }
        _ = try createCollection(properties: [:], alias: "default")
    }

    func createCollection(properties: [String: BusValue], alias: String) throws(SecretServiceError) -> [BusValue] {
        if !alias.isEmpty, let id = aliases.collectionID(for: alias, among: collections), let existing = collections[id]
        {
            return [.objectPath(existing.path), .objectPath(ObjectPaths.none)]
        }
        let label =
            try Self.string(properties[Self.collectionLabelProperty], named: Self.collectionLabelProperty)
            ?? (alias.isEmpty ? "collection" : alias)
        let control = try Self.accessControl(properties[Self.accessControlProperty]?.unwrapped)
        let allowed = try Self.allowedExecutables(properties[Self.allowedExecutablesProperty]?.unwrapped)
        let confirmsProperty = properties[Self.confirmEachAccessProperty]?.unwrapped
        guard let confirms = confirmsProperty.map(\.bool) ?? false else {
            throw SecretServiceError(.invalidArgs, "\(Self.confirmEachAccessProperty) is a boolean")
        }
        let name = newStoreName(preferring: alias.isEmpty ? label : alias)
        let path = dataDirectory + "/" + name
        do {
            // The TPM device, or TPM_KEYCHAIN_TCTI's; a simulator kept in the store only when the
            // daemon was allowed one (its collections then say SIMULATED).
            try KeychainLocation(path: path, tpm: newStoreTPM).createStore()
        } catch  where error.code == .tpmUnavailable && newStoreTPM != .automaticOrSimulated {
            throw SecretServiceError(
                .failed,
                "\(error.message). For the Secret Service daemon: start it with --allow-simulated (or \(StoreTPM.allowSimulatedVariable)=1) to keep new collections on a simulated TPM, reported as SIMULATED"
            )
        } catch {
            throw SecretServiceError(error)
        }
        let collection = SecretCollection(name: name, storePath: path)
        collections[collection.id] = collection
        if control != nil || allowed != nil || confirms {
            try collection.setUp(
                label: label, accessControl: control,
                enrollment: try control.map { (control) throws(SecretServiceError) in
                    try enrollment(binding: control)
                } ?? nil, allowedExecutables: allowed, confirmsEachAccess: confirms)
        } else if label != name {
            try collection.setLabel(label)
        }
        if !alias.isEmpty { try aliases.set(alias, to: collection) }
        emit(ObjectPaths.service, Introspection.serviceInterface, "CollectionCreated", [.objectPath(collection.path)])
        emitPropertiesChanged(
            ObjectPaths.service, Introspection.serviceInterface, ["Collections": collectionPaths()])
        return [.objectPath(collection.path), .objectPath(ObjectPaths.none)]
    }

    static let collectionLabelProperty = "org.freedesktop.Secret.Collection.Label"

    /// CreateCollection's property for a collection whose unlock asks for a person: flag names
    /// joined by commas (`devicePasscode`, `biometryCurrentSet,or,devicePasscode`, `userPresence`).
    static let accessControlProperty = "org.tpmkeychain.Collection.AccessControl"

    /// CreateCollection's property naming the programs (absolute paths of executables) that may
    /// use the collection's items; the others get AccessDenied.
    static let allowedExecutablesProperty = "org.tpmkeychain.Collection.AllowedExecutables"

    /// CreateCollection's property for a collection whose every read of a secret is confirmed by
    /// the person first (`--confirm-command`): its items look locked to each caller until an
    /// Unlock prompt is confirmed, and the confirmation covers that caller's next read call.
    static let confirmEachAccessProperty = "org.tpmkeychain.Collection.ConfirmEachAccess"

    static func allowedExecutables(_ value: BusValue?) throws(SecretServiceError) -> [String]? {
        guard let value else { return nil }
        guard case .array("s", let elements) = value, case let paths = elements.compactMap(\.string),
            !paths.isEmpty, paths.allSatisfy({ $0.hasPrefix("/") })
        else {
            throw SecretServiceError(
                .invalidArgs, "\(allowedExecutablesProperty) is a non-empty array of absolute paths")
        }
        return paths
    }

    static func accessControl(_ value: BusValue?) throws(SecretServiceError) -> AccessControl? {
        guard let value else { return nil }
        guard let text = value.string else {
            throw SecretServiceError(.invalidArgs, "\(accessControlProperty) is a string")
        }
        let names: [String: AccessControl.Flags] = [
            "userPresence": .userPresence, "biometryAny": .biometryAny, "biometryCurrentSet": .biometryCurrentSet,
            "devicePasscode": .devicePasscode, "or": .or, "and": .and,
        ]
        var flags: AccessControl.Flags = []
        for name in text.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) {
            guard let flag = names[name] else {
                throw SecretServiceError(
                    .invalidArgs,
                    "\(accessControlProperty): unknown flag \"\(name)\"; use \(names.keys.sorted().joined(separator: ", "))"
                )
            }
            flags.insert(flag)
        }
        do {
            return try AccessControl(.whenUnlockedThisDeviceOnly, flags: flags)
        } catch {
            throw SecretServiceError(error)
        }
    }

    /// The enrollment a biometryCurrentSet collection binds to, asked of the authenticator now.
    private func enrollment(binding control: AccessControl) throws(SecretServiceError) -> [UInt8]? {
        guard ItemService.bindsEnrollment(control) else { return nil }
        guard let authenticator else {
            throw SecretServiceError(
                .notSupported, "A biometryCurrentSet collection needs an authenticator: start the daemon with --fprintd"
            )
        }
        let result = SynchronousWait.run { () async -> Result<[UInt8]?, KeychainError> in
            do throws(KeychainError) {
                return .success(try await ItemService.enrollment(binding: control, authenticator: authenticator))
            } catch {
                return .failure(error)
            }
        }
        switch result {
        case .success(let enrollment): return enrollment
        case .failure(let error): throw SecretServiceError(error)
        }
    }

    /// A store name from a label: letters, digits, `-`, `_` and `.` kept, the rest `_`; made unique.
    private func newStoreName(preferring text: String) -> String {
        var base = String(
            text.lowercased().map { $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" ? $0 : "_" }.prefix(64))
        if base.isEmpty || base == SecretCollection.sessionName || base.hasPrefix(".") { base = "collection" }
        var name = base
        var number = 1
        while FileManager.default.fileExists(atPath: dataDirectory + "/" + name)
            || collections[ObjectPaths.element(for: name)] != nil
        {
            number += 1
            name = base + String(number)
        }
        return name
    }

    /// Locks every collection when the login session locks (once per lock; a state that cannot be
    /// read counts as locked). They stay locked after the session unlocks, until a client unlocks them.
    func followSessionLock(_ sessionLock: (any SessionLockState)?) {
        guard let sessionLock else { return }
        let locked = (try? sessionLock.isLocked()) ?? true
        defer { sessionWasLocked = locked }
        guard locked, !sessionWasLocked else { return }
        for collection in collections.values where !collection.isInMemory {
            let wasLocked = collection.isLocked
            collection.lock()
            if !wasLocked { emitCollectionChanged(collection) }
        }
        audit?.record(event: "the login session locked: every collection locked", collection: "*")
    }

    func sortedCollections() -> [SecretCollection] {
        refreshCollections()
        return collections.values.sorted { $0.name < $1.name }
    }

    func collectionPaths() -> BusValue {
        .objectPaths(sortedCollections().map(\.path))
    }

    func emitCollectionChanged(_ collection: SecretCollection) {
        emit(ObjectPaths.service, Introspection.serviceInterface, "CollectionChanged", [.objectPath(collection.path)])
        emitPropertiesChanged(
            collection.path, Introspection.collectionInterface, ["Locked": .bool(collection.isLocked)])
    }

    /// PropertiesChanged, always with the values: libsecret does not handle a property named as
    /// invalidated (``ItemsSignalSchedule``).
    func emitPropertiesChanged(_ path: String, _ interface: String, _ changed: [String: BusValue]) {
        emit(
            path, Introspection.propertiesInterface, "PropertiesChanged",
            [
                .string(interface), .properties(changed.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }),
                .array(element: "s", []),
            ])
    }
}

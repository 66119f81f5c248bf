import DBus

// org.freedesktop.DBus.Properties and Introspectable for every object.
extension SecretServiceProvider {
    func properties(
        _ call: BusMethodCall, target: ObjectPaths.Target, peer: BusPeer
    ) throws(SecretServiceError) -> [BusValue] {
        switch call.member {
        case "Get":
            try Self.expect(call, "ss")
            let all = try allProperties(of: target, interface: call.arguments[0].string ?? "", peer: peer)
            let name = call.arguments[1].string ?? ""
            guard let value = all.first(where: { $0.0 == name })?.1 else {
                throw SecretServiceError(.unknownProperty, "No property \(name) at \(call.path)")
            }
            return [.variant(value)]
        case "GetAll":
            try Self.expect(call, "s")
            return [
                .properties(
                    try allProperties(of: target, interface: call.arguments[0].string ?? "", peer: peer))
            ]
        case "Set":
            try Self.expect(call, "ssv")
            try setProperty(
                of: target, name: call.arguments[1].string ?? "", value: call.arguments[2].unwrapped, peer: peer)
            return []
        default:
            throw Self.unknownMethod(call)
        }
    }

    /// The properties of the object `target` names, for `interface` (empty: its main interface).
    private func allProperties(
        of target: ObjectPaths.Target, interface: String, peer: BusPeer
    ) throws(SecretServiceError) -> [(String, BusValue)] {
        let caller = peer.sender
        func requireInterface(_ expected: String) throws(SecretServiceError) {
            guard interface.isEmpty || interface == expected else {
                throw SecretServiceError(.unknownProperty, "No interface \(interface) on this object")
            }
        }
        switch target {
        case .service:
            try requireInterface(Introspection.serviceInterface)
            return [("Collections", collectionPaths())]
        case .collection(let id, let alias) where interface == Self.ownCollectionInterface:
            let collection = try collection(id, alias: alias)
            try authorize(.readMetadata, collection, for: peer)
            return [("TPM", .string(collection.tpmDescription))]
        case .collection(let id, let alias):
            try requireInterface(Introspection.collectionInterface)
            let collection = try collection(id, alias: alias)
            try authorize(.readMetadata, collection, for: peer)
            return [
                ("Items", try itemPaths(of: collection)), ("Label", .string(collection.label)),
                ("Locked", .bool(isLocked(collection, for: caller))), ("Created", .uint64(collection.created)),
                ("Modified", .uint64(collection.modified)),
            ]
        case .item(let id, let collectionID, let alias):
            try requireInterface(Introspection.itemInterface)
            let collection = try collection(collectionID, alias: alias)
            let item = try item(id, in: collection)
            try authorize(.readMetadata, collection, for: peer)
            return [
                ("Locked", .bool(isLocked(collection, for: caller))),
                ("Attributes", .stringDictionary(item.attributes)),
                ("Label", .string(item.label)), ("Type", .string(item.contentType)),
                ("Created", .uint64(item.created)), ("Modified", .uint64(item.modified)),
            ]
        case .session(let path):
            // The specification gives sessions and prompts no properties; one that does not
            // exist, or is another connection's, is no object at all.
            _ = try session(path, of: caller)
            return []
        case .prompt(let path):
            guard prompts[path]?.owner == caller else {
                throw SecretServiceError(.noSuchObject, "No prompt \(path) of this connection")
            }
            return []
        case .directory:
            return []
        case .unknown:
            throw SecretServiceError(.unknownObject, "No such object")
        }
    }

    private func setProperty(
        of target: ObjectPaths.Target, name: String, value: BusValue, peer: BusPeer
    ) throws(SecretServiceError) {
        switch target {
        case .collection(let id, let alias):
            let collection = try collection(id, alias: alias)
            guard name == "Label" else { throw readOnly(name) }
            guard let label = value.string else { throw SecretServiceError(.invalidArgs, "Label is a string") }
            try authorize(.write, collection, for: peer)
            try collection.setLabel(label)
            emitCollectionChanged(collection)
            emitPropertiesChanged(collection.path, Introspection.collectionInterface, ["Label": .string(label)])
        case .item(let id, let collectionID, let alias):
            let collection = try collection(collectionID, alias: alias)
            let item = try item(id, in: collection)
            try authorize(.write, collection, for: peer)
            let updated: SecretItem
            switch name {
            case "Label":
                guard let label = value.string else { throw SecretServiceError(.invalidArgs, "Label is a string") }
                updated = try collection.update(item, label: label)
            case "Attributes":
                guard let attributes = value.stringDictionary else {
                    throw SecretServiceError(.invalidArgs, "Attributes is a{ss}")
                }
                updated = try collection.update(item, attributes: attributes)
            default:
                throw readOnly(name)
            }
            let path = itemPath(updated, in: collection)
            emit(collection.path, Introspection.collectionInterface, "ItemChanged", [.objectPath(path)])
            emitPropertiesChanged(
                path, Introspection.itemInterface,
                name == "Label"
                    ? ["Label": .string(updated.label)] : ["Attributes": .stringDictionary(updated.attributes)])
        default:
            throw readOnly(name)
        }
    }

    /// Our own properties of a collection, beside the specification's: `TPM`, what its store is
    /// sealed to ("SIMULATED: ..." when nothing is bound to hardware).
    static let ownCollectionInterface = "org.tpmkeychain.Collection"

    private func readOnly(_ name: String) -> SecretServiceError {
        SecretServiceError(.propertyReadOnly, "The property \(name) cannot be set")
    }

    func introspect(_ target: ObjectPaths.Target) throws(SecretServiceError) -> String {
        switch target {
        case .service:
            return Introspection.document(
                interfaces: [Introspection.serviceInterface], children: ["collection", "aliases", "session", "prompt"])
        case .collection(let id, let alias):
            let collection = try collection(id, alias: alias)
            return Introspection.document(
                interfaces: [Introspection.collectionInterface], children: try collection.items().map(\.id))
        case .item:
            return Introspection.document(interfaces: [Introspection.itemInterface], children: [])
        case .session:
            return Introspection.document(interfaces: [Introspection.sessionInterface], children: [])
        case .prompt:
            return Introspection.document(interfaces: [Introspection.promptInterface], children: [])
        case .directory("collection"):
            return Introspection.document(interfaces: [], children: sortedCollections().map(\.id))
        case .directory("aliases"):
            return Introspection.document(interfaces: [], children: ["default"])
        case .directory(let name):
            let prefix = name == "session" ? ObjectPaths.sessionPrefix : ObjectPaths.promptPrefix
            let paths = name == "session" ? Array(sessions.keys) : Array(prompts.keys)
            return Introspection.document(
                interfaces: [], children: paths.map { String($0.dropFirst(prefix.count)) }.sorted())
        case .unknown:
            throw SecretServiceError(.unknownObject, "No such object")
        }
    }
}

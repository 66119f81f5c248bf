import DBus
import TPMKeychain

/// org.freedesktop.Secret.Item at `…/collection/<c>/<item>` (or under an alias): one item's
/// secret, label and attributes. A read of its secret is decided for its collection, and uses up
/// the caller's confirmation when the collection confirms each access.
struct ItemObject: SecretServiceObject {
    let registry: SecretServiceRegistry
    let id: String
    /// The collection's path element, or an alias when `alias`.
    let collectionID: String
    let alias: Bool

    private func resolve() throws(SecretServiceError) -> (SecretCollection, SecretItem) {
        let collection = try registry.collection(collectionID, alias: alias)
        return (collection, try registry.item(id, in: collection))
    }

    static func path(of item: SecretItem, in collection: SecretCollection) -> String {
        ObjectPaths.item(item.id, in: collection.id)
    }

    func call(_ call: BusMethodCall, from peer: BusPeer) throws(SecretServiceError) -> [BusValue] {
        let (collection, item) = try resolve()
        guard call.isFor(Introspection.itemInterface) else { throw call.unknownMethod }
        let path = Self.path(of: item, in: collection)
        switch call.member {
        case "GetSecret":
            try call.requireSignature("o")
            let session = try registry.sessions.session(call.arguments[0].objectPath ?? "", of: call.sender)
            let secret = try Self.secret(of: item, in: collection, for: session, peer: peer, registry: registry)
            registry.useConfirmation(of: collection, item: item, by: call.sender)
            return [secret]
        case "SetSecret":
            try call.requireSignature("(oayays)")
            try registry.authorize(.write, collection, for: peer, item: item)
            let secret = try registry.sessions.secret(from: call.arguments[0], sender: call.sender)
            _ = try collection.update(item, secret: secret)
            registry.audit?.record(peer: peer, action: "write", collection: collection.label, item: item.label)
            registry.emit(collection.path, Introspection.collectionInterface, "ItemChanged", [.objectPath(path)])
            return []
        case "Delete":
            try call.requireSignature("")
            try registry.authorize(.delete, collection, for: peer, item: item)
            try collection.delete(item)
            registry.audit?.record(peer: peer, action: "delete", collection: collection.label, item: item.label)
            registry.itemsChanged(in: collection)
            registry.emit(collection.path, Introspection.collectionInterface, "ItemDeleted", [.objectPath(path)])
            return [.objectPath(ObjectPaths.none)]
        default:
            throw call.unknownMethod
        }
    }

    func properties(of interface: String, for peer: BusPeer) throws(SecretServiceError) -> [(String, BusValue)] {
        try Self.requireInterface(interface, is: Introspection.itemInterface)
        let (collection, item) = try resolve()
        try registry.authorize(.readMetadata, collection, for: peer)
        return [
            ("Locked", .bool(registry.isLocked(collection, for: peer, item: item))),
            ("Attributes", .stringDictionary(item.attributes)),
            ("Label", .string(item.label)), ("Type", .string(item.contentType)),
            ("Created", .uint64(item.created)), ("Modified", .uint64(item.modified)),
        ]
    }

    func setProperty(_ name: String, to value: BusValue, by peer: BusPeer) throws(SecretServiceError) {
        let (collection, item) = try resolve()
        try registry.authorize(.write, collection, for: peer, item: item)
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
            throw .readOnly(name)
        }
        let path = Self.path(of: updated, in: collection)
        registry.emit(collection.path, Introspection.collectionInterface, "ItemChanged", [.objectPath(path)])
        registry.emitPropertiesChanged(
            path, Introspection.itemInterface,
            name == "Label"
                ? ["Label": .string(updated.label)] : ["Attributes": .stringDictionary(updated.attributes)])
    }

    /// Answered from the path alone: an item's node has no children to look up.
    func introspect() -> String {
        Introspection.document(interfaces: [Introspection.itemInterface], children: [])
    }

    /// The `(oayays)` secret struct for `item`, encrypted for `session`: GetSecret's answer, and
    /// each entry of the service's GetSecrets.
    static func secret(
        of item: SecretItem, in collection: SecretCollection, for session: TransferSession, peer: BusPeer,
        registry: SecretServiceRegistry
    ) throws(SecretServiceError) -> BusValue {
        try registry.authorize(.readSecret, collection, for: peer, item: item)
        let (secret, contentType) = try collection.secret(of: item)
        registry.audit?.record(peer: peer, action: "read", collection: collection.label, item: item.label)
        return try session.secretStruct(secret, contentType: contentType)
    }
}

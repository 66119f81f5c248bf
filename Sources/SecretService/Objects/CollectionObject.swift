import DBus
import TPMKeychain

/// org.freedesktop.Secret.Collection at `…/collection/<id>` or `…/aliases/<alias>`: one store's
/// items, searched, created and deleted with it; and org.tpmkeychain.Collection, what the store is
/// sealed to.
struct CollectionObject: SecretServiceObject {
    let registry: SecretServiceRegistry
    /// The path element, or the alias when `alias`.
    let id: String
    let alias: Bool

    /// Our own properties of a collection, beside the specification's: `TPM`, what its store is
    /// sealed to ("SIMULATED: ..." when nothing is bound to hardware).
    static let ownInterface = "org.tpmkeychain.Collection"

    private func collection() throws(SecretServiceError) -> SecretCollection {
        try registry.collection(id, alias: alias)
    }

    func call(_ call: BusMethodCall, from peer: BusPeer) throws(SecretServiceError) -> [BusValue] {
        let collection = try collection()
        guard call.isFor(Introspection.collectionInterface) else { throw call.unknownMethod }
        switch call.member {
        case "SearchItems":
            try call.requireSignature("a{ss}")
            try registry.authorize(.readMetadata, collection, for: peer)
            let found = try collection.search(
                registry.takePurpose(from: call.arguments[0].stringDictionary ?? [:], of: call.sender))
            return [.objectPaths(found.map { ItemObject.path(of: $0, in: collection) })]
        case "CreateItem":
            try call.requireSignature("a{sv}(oayays)b")
            try registry.authorize(.write, collection, for: peer)
            return try createItem(in: collection, call: call, peer: peer)
        case "Delete":
            try call.requireSignature("")
            guard !collection.isInMemory else {
                throw SecretServiceError(
                    .notSupported, "The session collection ends with the daemon; it cannot be deleted")
            }
            try registry.authorize(.delete, collection, for: peer)
            try delete(collection)
            registry.audit?.record(peer: peer, action: "delete collection", collection: collection.label, item: nil)
            return [.objectPath(ObjectPaths.none)]
        default:
            throw call.unknownMethod
        }
    }

    func properties(of interface: String, for peer: BusPeer) throws(SecretServiceError) -> [(String, BusValue)] {
        if interface == Self.ownInterface {
            let collection = try collection()
            try registry.authorize(.readMetadata, collection, for: peer)
            return [("TPM", .string(collection.tpmDescription))]
        }
        try Self.requireInterface(interface, is: Introspection.collectionInterface)
        let collection = try collection()
        try registry.authorize(.readMetadata, collection, for: peer)
        return [
            ("Items", try Self.itemPaths(of: collection)), ("Label", .string(collection.label)),
            ("Locked", .bool(registry.isLocked(collection, for: peer))),
            ("Created", .uint64(collection.created)), ("Modified", .uint64(collection.modified)),
        ]
    }

    func setProperty(_ name: String, to value: BusValue, by peer: BusPeer) throws(SecretServiceError) {
        let collection = try collection()
        guard name == "Label" else { throw .readOnly(name) }
        guard let label = value.string else { throw SecretServiceError(.invalidArgs, "Label is a string") }
        try registry.authorize(.write, collection, for: peer)
        try collection.setLabel(label)
        registry.emitCollectionChanged(collection)
        registry.emitPropertiesChanged(collection.path, Introspection.collectionInterface, ["Label": .string(label)])
    }

    func introspect() throws(SecretServiceError) -> String {
        let collection = try collection()
        return Introspection.document(
            interfaces: [Introspection.collectionInterface], children: try collection.items().map(\.id))
    }

    /// The collection's `Items` value.
    static func itemPaths(of collection: SecretCollection) throws(SecretServiceError) -> BusValue {
        .objectPaths(try collection.items().map { ItemObject.path(of: $0, in: collection) })
    }

    private func createItem(
        in collection: SecretCollection, call: BusMethodCall, peer: BusPeer
    ) throws(SecretServiceError) -> [BusValue] {
        let properties = try NewItemProperties(call.arguments[0])
        let secret = try registry.sessions.secret(from: call.arguments[1], sender: call.sender)
        let (item, isNew) = try collection.create(
            label: properties.label, attributes: properties.attributes, secret: secret.value,
            contentType: secret.contentType, replace: call.arguments[2].bool ?? false)
        let path = ItemObject.path(of: item, in: collection)
        registry.audit?.record(
            peer: peer, action: isNew ? "create" : "replace", collection: collection.label, item: item.label)
        // The new list first, so that libsecret finds the item in it at ItemCreated.
        if isNew { registry.itemsChanged(in: collection) }
        registry.emit(
            collection.path, Introspection.collectionInterface, isNew ? "ItemCreated" : "ItemChanged",
            [.objectPath(path)])
        return [.objectPath(path), .objectPath(ObjectPaths.none)]
    }

    private func delete(_ collection: SecretCollection) throws(SecretServiceError) {
        guard let storePath = collection.storePath else { return }
        collection.close()
        do {
            try KeychainLocation(path: storePath).removeStore()
        } catch {
            throw SecretServiceError(error)
        }
        registry.remove(collection)
        registry.emit(
            ObjectPaths.service, Introspection.serviceInterface, "CollectionDeleted", [.objectPath(collection.path)])
        registry.emitPropertiesChanged(
            ObjectPaths.service, Introspection.serviceInterface, ["Collections": registry.collectionPaths()])
    }
}

import DBus
import TPMKeychain

// org.freedesktop.Secret.Collection and org.freedesktop.Secret.Item.
extension SecretServiceProvider {
    static let itemLabelProperty = "org.freedesktop.Secret.Item.Label"
    static let itemAttributesProperty = "org.freedesktop.Secret.Item.Attributes"
    static let itemTypeProperty = "org.freedesktop.Secret.Item.Type"

    func collectionMethod(
        _ call: BusMethodCall, collection: SecretCollection, peer: BusPeer
    ) throws(SecretServiceError) -> [BusValue] {
        guard call.interface.isEmpty || call.interface == Introspection.collectionInterface else {
            throw Self.unknownMethod(call)
        }
        let arguments = call.arguments
        switch call.member {
        case "SearchItems":
            try Self.expect(call, "a{ss}")
            try authorize(.readMetadata, collection, for: peer)
            let found = try collection.search(arguments[0].stringDictionary ?? [:])
            return [.objectPaths(found.map { itemPath($0, in: collection) })]
        case "CreateItem":
            try Self.expect(call, "a{sv}(oayays)b")
            try authorize(.write, collection, for: peer)
            guard let properties = arguments[0].dictionary else {
                throw SecretServiceError(.invalidArgs, "CreateItem's properties repeat a name")
            }
            let label = try Self.string(properties[Self.itemLabelProperty], named: Self.itemLabelProperty) ?? ""
            guard
                let attributes = (properties[Self.itemAttributesProperty]?.unwrapped ?? .stringDictionary([:]))
                    .stringDictionary
            else { throw SecretServiceError(.invalidArgs, "\(Self.itemAttributesProperty) is a{ss}") }
            let secret = try secret(from: arguments[1], sender: call.sender)
            let (item, isNew) = try collection.create(
                label: label, attributes: attributes, secret: secret.value, contentType: secret.contentType,
                replace: arguments[2].bool ?? false)
            let path = itemPath(item, in: collection)
            audit?.record(
                peer: peer, action: isNew ? "create" : "replace", collection: collection.label, item: item.label)
            // The new list first, so that libsecret finds the item in it at ItemCreated.
            if isNew { itemsChanged(in: collection) }
            emit(
                collection.path, Introspection.collectionInterface, isNew ? "ItemCreated" : "ItemChanged",
                [.objectPath(path)])
            return [.objectPath(path), .objectPath(ObjectPaths.none)]
        case "Delete":
            try Self.expect(call, "")
            guard !collection.isInMemory else {
                throw SecretServiceError(
                    .notSupported, "The session collection ends with the daemon; it cannot be deleted")
            }
            try authorize(.delete, collection, for: peer)
            try deleteCollection(collection)
            audit?.record(peer: peer, action: "delete collection", collection: collection.label, item: nil)
            return [.objectPath(ObjectPaths.none)]
        default:
            throw Self.unknownMethod(call)
        }
    }

    func itemMethod(
        _ call: BusMethodCall, item: SecretItem, in collection: SecretCollection, peer: BusPeer
    ) throws(SecretServiceError) -> [BusValue] {
        guard call.interface.isEmpty || call.interface == Introspection.itemInterface else {
            throw Self.unknownMethod(call)
        }
        let path = itemPath(item, in: collection)
        switch call.member {
        case "GetSecret":
            try Self.expect(call, "o")
            let session = try session(call.arguments[0].objectPath ?? "", of: call.sender)
            let secret = try secretStruct(of: item, in: collection, session: session, peer: peer)
            useConfirmation(of: collection, by: call.sender)
            return [secret]
        case "SetSecret":
            try Self.expect(call, "(oayays)")
            try authorize(.write, collection, for: peer)
            let secret = try secret(from: call.arguments[0], sender: call.sender)
            _ = try collection.update(item, secret: secret)
            audit?.record(peer: peer, action: "write", collection: collection.label, item: item.label)
            emit(collection.path, Introspection.collectionInterface, "ItemChanged", [.objectPath(path)])
            return []
        case "Delete":
            try Self.expect(call, "")
            try authorize(.delete, collection, for: peer)
            try collection.delete(item)
            audit?.record(peer: peer, action: "delete", collection: collection.label, item: item.label)
            itemsChanged(in: collection)
            emit(collection.path, Introspection.collectionInterface, "ItemDeleted", [.objectPath(path)])
            return [.objectPath(ObjectPaths.none)]
        default:
            throw Self.unknownMethod(call)
        }
    }

    func itemPaths(of collection: SecretCollection) throws(SecretServiceError) -> BusValue {
        .objectPaths(try collection.items().map { itemPath($0, in: collection) })
    }

    /// The collection's items changed: its `Items` value goes out now, or with the next batch
    /// (``ItemsSignalSchedule``).
    func itemsChanged(in collection: SecretCollection) {
        guard itemsSignals.itemsChanged(collection.id, at: .now) else { return }
        emitItems(of: collection)
    }

    /// Sends the `Items` values that waited and are due; when the next one will be.
    func sendDueItemsSignals() -> ContinuousClock.Instant? {
        for id in itemsSignals.takeDue(at: .now) {
            if let collection = collections[id] { emitItems(of: collection) }
        }
        return itemsSignals.nextDue
    }

    private func emitItems(of collection: SecretCollection) {
        // A listing that fails now (the store went away) sends nothing; a client reads it again.
        guard let paths = try? itemPaths(of: collection) else { return }
        emitPropertiesChanged(collection.path, Introspection.collectionInterface, ["Items": paths])
    }

    private func deleteCollection(_ collection: SecretCollection) throws(SecretServiceError) {
        guard let storePath = collection.storePath else { return }
        collection.close()
        do {
            try KeychainLocation(path: storePath).removeStore()
        } catch {
            throw SecretServiceError(error)
        }
        collections[collection.id] = nil
        itemsSignals.forget(collection.id)
        aliases.forget(collection)
        emit(ObjectPaths.service, Introspection.serviceInterface, "CollectionDeleted", [.objectPath(collection.path)])
        emitPropertiesChanged(ObjectPaths.service, Introspection.serviceInterface, ["Collections": collectionPaths()])
    }
}

import DBus
import TPMKeychain

// What the daemon says without being asked: the signals more than one object sends (a collection
// changed, PropertiesChanged), and what the loop hands over between calls (the login session's
// lock, batched Items values, prompts' outcomes).
extension SecretServiceRegistry {
    func emit(_ path: String, _ interface: String, _ member: String, _ values: [BusValue]) {
        // A signal that cannot be queued (out of memory) is lost; the call itself has succeeded.
        try? connection.emit(path: path, interface: interface, member: member, values: values)
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

    func emitCollectionChanged(_ collection: SecretCollection) {
        emit(ObjectPaths.service, Introspection.serviceInterface, "CollectionChanged", [.objectPath(collection.path)])
        emitPropertiesChanged(
            collection.path, Introspection.collectionInterface, ["Locked": .bool(collection.isLocked)])
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
        guard let paths = try? CollectionObject.itemPaths(of: collection) else { return }
        emitPropertiesChanged(collection.path, Introspection.collectionInterface, ["Items": paths])
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

    /// Outcomes the prompts' tasks posted, applied on the loop thread by the prompts they end.
    func applyPromptOutcomes() {
        for outcome in promptOutcomes.withLock({ (outcomes) -> [PromptOutcome] in
            defer { outcomes.removeAll() }
            return outcomes
        }) {
            PromptObject(registry: self, path: outcome.path).apply(outcome)
        }
    }
}

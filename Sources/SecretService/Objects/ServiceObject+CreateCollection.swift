import DBus
import FoundationEssentials
import TPMKeychain

// CreateCollection: a new store in the data directory, sealed to the TPM the daemon was told to
// use, with the properties item that holds its access control and rules when it has any.
extension ServiceObject {
    /// Creates the collection "default" names, the store `default` (the Keychain API's and the
    /// CLI's), unless it exists or the alias was removed: clients expect a default collection.
    func ensureDefaultCollection() throws(SecretServiceError) {
        guard registry.aliases.collectionID(for: "default", among: registry.collections) == nil,
            !registry.aliases.wasRemoved("default")
        else {
            return
        }
        _ = try createCollection(properties: [:], alias: "default")
    }

    func createCollection(properties: [String: BusValue], alias: String) throws(SecretServiceError) -> [BusValue] {
        if !alias.isEmpty, let id = registry.aliases.collectionID(for: alias, among: registry.collections),
            let existing = registry.collections[id]
        {
            return [.objectPath(existing.path), .objectPath(ObjectPaths.none)]
        }
        let asked = try NewCollectionProperties(properties)
        let label = asked.label ?? (alias.isEmpty ? "collection" : alias)
        let dataDirectory = registry.dataDirectory
        let name = Self.storeName(preferring: alias.isEmpty ? label : alias) { (name) in
            FileManager.default.fileExists(atPath: dataDirectory + "/" + name)
                || registry.collections[ObjectPaths.element(for: name)] != nil
        }
        let path = dataDirectory + "/" + name
        do {
            // The TPM device, or TPM_KEYCHAIN_TCTI's; a simulator kept in the store only when the
            // daemon was allowed one (its collections then say SIMULATED).
            try KeychainLocation(path: path, tpm: registry.newStoreTPM).createStore()
        } catch  where error.code == .tpmUnavailable && registry.newStoreTPM != .automaticOrSimulated {
            throw SecretServiceError(
                .failed,
                "\(error.message). For the Secret Service daemon: start it with --allow-simulated (or \(StoreTPM.allowSimulatedVariable)=1) to keep new collections on a simulated TPM, reported as SIMULATED"
            )
        } catch {
            throw SecretServiceError(error)
        }
        let collection = SecretCollection(name: name, storePath: path)
        registry.add(collection)
        if asked.needsPropertiesItem {
            try collection.setUp(
                label: label, accessControl: asked.accessControl,
                enrollment: try asked.accessControl.map { (control) throws(SecretServiceError) in
                    try enrollment(binding: control)
                } ?? nil, allowedExecutables: asked.allowedExecutables, confirmsEachAccess: asked.confirmsEachAccess)
        } else if label != name {
            try collection.setLabel(label)
        }
        if !alias.isEmpty { try registry.aliases.set(alias, to: collection) }
        registry.emit(
            ObjectPaths.service, Introspection.serviceInterface, "CollectionCreated", [.objectPath(collection.path)])
        registry.emitPropertiesChanged(
            ObjectPaths.service, Introspection.serviceInterface, ["Collections": registry.collectionPaths()])
        return [.objectPath(collection.path), .objectPath(ObjectPaths.none)]
    }

    /// The enrollment a biometryCurrentSet collection binds to, asked of the authenticator now.
    private func enrollment(binding control: AccessControl) throws(SecretServiceError) -> [UInt8]? {
        guard ItemService.bindsEnrollment(control) else { return nil }
        guard let authenticator = registry.authenticator else {
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

    /// A store name from a label: lowercased, letters, digits, `-` and `_` kept and every other
    /// character `_` (a name is a directory, and a path element once escaped), at most 64
    /// characters; "collection" when that leaves nothing or the in-memory collection's name; a
    /// number appended until `isTaken` says no.
    static func storeName(preferring text: String, isTaken: (String) -> Bool) -> String {
        var base = String(
            text.lowercased().map { $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" ? $0 : "_" }.prefix(64))
        if base.isEmpty || base == SecretCollection.sessionName || base.hasPrefix(".") { base = "collection" }
        var name = base
        var number = 1
        while isTaken(name) {
            number += 1
            name = base + String(number)
        }
        return name
    }
}

import DBus

/// `…/collection`, `…/aliases`, `…/session` and `…/prompt`: nodes with children only, there so
/// that a client walking the tree with Introspect finds every object.
struct DirectoryObject: SecretServiceObject {
    let registry: SecretServiceRegistry
    /// The last element of the path.
    let name: String

    func call(_ call: BusMethodCall, from peer: BusPeer) throws(SecretServiceError) -> [BusValue] {
        throw call.unknownMethod
    }

    func properties(of interface: String, for peer: BusPeer) -> [(String, BusValue)] { [] }

    func introspect() -> String {
        switch name {
        case "collection":
            return Introspection.document(interfaces: [], children: registry.sortedCollections().map(\.id))
        case "aliases":
            return Introspection.document(interfaces: [], children: ["default"])
        default:
            let prefix = name == "session" ? ObjectPaths.sessionPrefix : ObjectPaths.promptPrefix
            let paths = name == "session" ? registry.sessions.paths : Array(registry.prompts.keys)
            return Introspection.document(
                interfaces: [], children: paths.map { String($0.dropFirst(prefix.count)) }.sorted())
        }
    }
}

/// A path under the service that names nothing.
struct NoObject: SecretServiceObject {
    let path: String

    func call(_ call: BusMethodCall, from peer: BusPeer) throws(SecretServiceError) -> [BusValue] {
        throw SecretServiceError(.unknownObject, "No object at \(path)")
    }

    func properties(of interface: String, for peer: BusPeer) throws(SecretServiceError) -> [(String, BusValue)] {
        throw SecretServiceError(.unknownObject, "No such object")
    }

    func introspect() throws(SecretServiceError) -> String {
        throw SecretServiceError(.unknownObject, "No such object")
    }
}

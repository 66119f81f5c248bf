import DBus
import FoundationEssentials
import SystemCalls

/// A Secret Service provider as its clients call it, for moving items in (``ProviderImport``)
/// and out (``PortalMove``): calls go to its owner's unique name, so no one else can answer them.
struct ProviderClient {
    let connection: BusConnection
    let owner: String
    let name: String

    /// A client of the provider that owns `name` on the bus at `address` (nil: the session bus).
    static func connect(
        address: String?, name: String, description: String
    ) throws(ProviderImport.Failure)
        -> ProviderClient
    {
        do {
            let connection = try BusConnection(
                address: address, sessionBus: address == nil, description: description,
                methodCallTimeout: .seconds(25))
            return ProviderClient(connection: connection, owner: try connection.nameOwner(name), name: name)
        } catch {
            throw ProviderImport.Failure("no Secret Service provider owns \(name) on this bus (\(error.message))")
        }
    }

    func call(
        _ path: String, _ interface: String, _ member: String, _ values: [BusValue]
    ) throws(ProviderImport.Failure)
        -> [BusValue]
    {
        do {
            return try connection.call(
                destination: owner, path: path, interface: interface, member: member, values: values)
        } catch {
            throw ProviderImport.Failure("\(name) refused \(member) on \(path): \(error.description)")
        }
    }

    func property(_ path: String, _ interface: String, _ name: String) throws(ProviderImport.Failure) -> BusValue {
        let reply = try call(path, "org.freedesktop.DBus.Properties", "Get", [.string(interface), .string(name)])
        return reply.first?.unwrapped ?? .string("")
    }

    func allProperties(_ path: String, _ interface: String) throws(ProviderImport.Failure) -> [String: BusValue] {
        try call(path, "org.freedesktop.DBus.Properties", "GetAll", [.string(interface)]).first?.dictionary ?? [:]
    }

    /// The items whose attributes include `attributes`, unlocked and locked.
    func searchItems(
        _ attributes: [String: String]
    ) throws(ProviderImport.Failure) -> (
        unlocked: [String], locked: [String]
    ) {
        let reply = try call(
            "/org/freedesktop/secrets", "org.freedesktop.Secret.Service", "SearchItems",
            [.stringDictionary(attributes)])
        guard reply.count == 2 else { throw ProviderImport.Failure("\(name)'s SearchItems reply is not (ao, ao)") }
        return (reply[0].objectPathArray ?? [], reply[1].objectPathArray ?? [])
    }

    /// Deletes an item; false when the provider answers with a prompt (which is not run).
    func delete(_ item: String) throws(ProviderImport.Failure) -> Bool {
        let reply = try call(item, "org.freedesktop.Secret.Item", "Delete", [])
        return reply.first?.objectPath == "/"
    }

    func objectPaths(_ path: String, _ interface: String, _ name: String) throws(ProviderImport.Failure) -> [String] {
        try property(path, interface, name).objectPathArray ?? []
    }

    /// A DH session with the provider, its path and key.
    func openSession() throws(ProviderImport.Failure) -> (path: String, session: TransferSession) {
        var keyPair: DiffieHellmanGroup2.KeyPair
        do {
            keyPair = try DiffieHellmanGroup2.KeyPair()
        } catch {
            throw ProviderImport.Failure("no Diffie-Hellman key pair: \(error.message)")
        }
        defer { keyPair.erase() }
        let reply = try call(
            "/org/freedesktop/secrets", "org.freedesktop.Secret.Service", "OpenSession",
            [.string(TransferSession.diffieHellmanName), .variant(.bytes(keyPair.publicValue))])
        guard reply.count == 2, let peer = reply[0].unwrapped.byteArray, let path = reply[1].objectPath else {
            throw ProviderImport.Failure("\(name)'s OpenSession reply is not (v ay, o)")
        }
        do {
            let key = try keyPair.sessionKey(peerPublic: peer)
            return (path, TransferSession(path: path, owner: owner, algorithm: .diffieHellman(key)))
        } catch {
            throw ProviderImport.Failure("\(name) did not agree on an encrypted session: \(error.message)")
        }
    }

    /// Unlocks a collection, running the provider's prompt (its own dialog) when it returns one.
    /// False when it stays locked.
    func unlock(_ path: String) throws(ProviderImport.Failure) -> Bool {
        let reply = try call(
            "/org/freedesktop/secrets", "org.freedesktop.Secret.Service", "Unlock", [.objectPaths([path])])
        guard reply.count == 2 else { return false }
        if reply[0].objectPathArray?.contains(path) == true { return true }
        guard let prompt = reply[1].objectPath, prompt != "/" else { return false }
        let wakeup: Wakeup
        do {
            wakeup = try Wakeup()
        } catch {
            throw ProviderImport.Failure("no eventfd: \(error)")
        }
        let completed: [BusValue]?
        do {
            // Subscribed before Prompt() is called: the Completed signal cannot be missed.
            completed = try connection.waitForSignal(
                from: owner, path: prompt, interface: "org.freedesktop.Secret.Prompt", member: "Completed",
                until: .now + .seconds(300), wakeup: wakeup.descriptor
            ) { () throws(BusError) in
                _ = try connection.call(
                    destination: owner, path: prompt, interface: "org.freedesktop.Secret.Prompt", member: "Prompt",
                    values: [.string("")])
            }
        } catch {
            throw ProviderImport.Failure("waiting for \(name)'s unlock prompt: \(error.description)")
        }
        return completed?.first?.bool == false
    }

    /// The secrets of `items`, decrypted, by path (locked items are left out by the provider).
    func secrets(
        _ items: [String], session: (path: String, session: TransferSession)
    ) throws(ProviderImport.Failure) -> [String: (value: [UInt8], contentType: String)] {
        let reply = try call(
            "/org/freedesktop/secrets", "org.freedesktop.Secret.Service", "GetSecrets",
            [.objectPaths(items), .objectPath(session.path)])
        var result: [String: (value: [UInt8], contentType: String)] = [:]
        for entry in reply.first?.elements ?? [] {
            guard case .dictionaryEntry(.objectPath(let path), let secret) = entry, let fields = secret.fields,
                fields.count == 4, let parameters = fields[1].byteArray, let value = fields[2].byteArray
            else { continue }
            do throws(SecretServiceError) {
                result[path] = (
                    try session.session.decrypt(parameters: parameters, value: value), fields[3].string ?? "text/plain"
                )
            } catch {
                throw ProviderImport.Failure("a secret from \(name) could not be decrypted: \(error.message)")
            }
        }
        return result
    }
}

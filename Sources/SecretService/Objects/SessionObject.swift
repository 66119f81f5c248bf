import DBus

/// org.freedesktop.Secret.Session at `…/session/<n>`: how one client's secrets cross the bus.
/// Only the connection that opened a session may use it, close it, or see it at all.
struct SessionObject: SecretServiceObject {
    let registry: SecretServiceRegistry
    let path: String

    func call(_ call: BusMethodCall, from peer: BusPeer) throws(SecretServiceError) -> [BusValue] {
        guard call.member == "Close", call.isFor(Introspection.sessionInterface) else { throw call.unknownMethod }
        try registry.sessions.close(path, by: call.sender)
        return []
    }

    func properties(of interface: String, for peer: BusPeer) throws(SecretServiceError) -> [(String, BusValue)] {
        // The specification gives sessions no properties; one that does not exist, or is another
        // connection's, is no object at all.
        _ = try registry.sessions.session(path, of: peer.sender)
        return []
    }

    func introspect() -> String {
        Introspection.document(interfaces: [Introspection.sessionInterface], children: [])
    }

    /// OpenSession's agreement: the session `algorithm` names, at `path`, for `owner`, and the
    /// output the client gets back (our public value for DH).
    ///
    /// - Throws: ``SecretServiceError`` `.notSupported` for an unknown algorithm, `.invalidArgs`
    ///   for a DH input that is not a byte array or not a valid public value.
    static func negotiate(
        algorithm: String, input: BusValue, path: String, owner: String
    ) throws(SecretServiceError) -> (output: BusValue, session: TransferSession) {
        switch algorithm {
        case TransferSession.plainName:
            return (.string(""), TransferSession(path: path, owner: owner, algorithm: .plain))
        case TransferSession.diffieHellmanName:
            guard let clientPublic = input.byteArray else {
                throw SecretServiceError(.invalidArgs, "\(algorithm) takes the client's public value as ay")
            }
            let (ourPublic, key) = try DiffieHellmanGroup2.agree(clientPublic: clientPublic)
            return (.bytes(ourPublic), TransferSession(path: path, owner: owner, algorithm: .diffieHellman(key)))
        default:
            throw SecretServiceError(
                .notSupported,
                "The algorithm \"\(algorithm)\" is not supported; use \(TransferSession.plainName) or \(TransferSession.diffieHellmanName)"
            )
        }
    }
}

/// The sessions clients opened, by path, each answering only the connection that opened it.
struct SessionTable {
    private var byPath: [String: TransferSession] = [:]

    var paths: [String] { Array(byPath.keys) }

    func count(of owner: String) -> Int {
        byPath.values.count { $0.owner == owner }
    }

    mutating func add(_ session: TransferSession) {
        byPath[session.path] = session
    }

    /// The session `path` names, if `sender` opened it.
    ///
    /// - Throws: ``SecretServiceError`` `.noSession` when no session at `path` is `sender`'s.
    func session(_ path: String, of sender: String) throws(SecretServiceError) -> TransferSession {
        guard let session = byPath[path], session.owner == sender else {
            throw SecretServiceError(.noSession, "No session \(path) opened by this connection; call OpenSession")
        }
        return session
    }

    /// Session.Close.
    ///
    /// - Throws: ``SecretServiceError`` `.noSuchObject` when `sender` did not open `path`.
    mutating func close(_ path: String, by sender: String) throws(SecretServiceError) {
        guard let session = byPath[path], session.owner == sender else {
            throw SecretServiceError(.noSuchObject, "No session \(path) of this connection")
        }
        byPath[session.path] = nil
    }

    /// The connection left the bus: its sessions end with it.
    mutating func forget(owner: String) {
        byPath = byPath.filter { $0.value.owner != owner }
    }

    /// A secret struct from a client: its bytes, decrypted with the session it names, and content
    /// type.
    ///
    /// - Throws: ``SecretServiceError`` `.invalidArgs` for a struct that is not `(oayays)` or does
    ///   not decrypt; `.noSession` when the session is not `sender`'s.
    func secret(
        from value: BusValue, sender: String
    ) throws(SecretServiceError) -> (value: [UInt8], contentType: String) {
        guard let fields = value.fields, fields.count == 4, let sessionPath = fields[0].objectPath,
            let parameters = fields[1].byteArray, let bytes = fields[2].byteArray, let contentType = fields[3].string
        else {
            throw SecretServiceError(.invalidArgs, "A secret is (oayays): session, parameters, value, content type")
        }
        let session = try session(sessionPath, of: sender)
        return (try session.decrypt(parameters: parameters, value: bytes), contentType)
    }
}

extension TransferSession {
    /// The `(oayays)` struct a secret goes to the client in, encrypted for this session.
    func secretStruct(_ secret: [UInt8], contentType: String) throws(SecretServiceError) -> BusValue {
        let (parameters, value) = try encrypt(secret)
        return .structure([.objectPath(path), .bytes(parameters), .bytes(value), .string(contentType)])
    }
}

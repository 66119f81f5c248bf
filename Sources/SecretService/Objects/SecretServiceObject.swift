import DBus

/// One object the daemon serves, as the registry hands it a call: the methods of its own interface,
/// its properties and its introspection data. Each kind is its own type, so that what one
/// interface answers is read in one file; the state behind them is the registry's.
protocol SecretServiceObject {
    /// A call of the object's own interface (or of no named interface).
    func call(_ call: BusMethodCall, from peer: BusPeer) throws(SecretServiceError) -> [BusValue]

    /// The properties `interface` gives the object (empty: its main interface), for Get and GetAll.
    func properties(of interface: String, for peer: BusPeer) throws(SecretServiceError) -> [(String, BusValue)]

    /// Set. Most properties are read-only: an object without writable ones keeps the refusal.
    func setProperty(_ name: String, to value: BusValue, by peer: BusPeer) throws(SecretServiceError)

    /// The object's `Introspect` answer.
    func introspect() throws(SecretServiceError) -> String
}

extension SecretServiceObject {
    func setProperty(_ name: String, to value: BusValue, by peer: BusPeer) throws(SecretServiceError) {
        throw .readOnly(name)
    }

    /// org.freedesktop.DBus.Properties, for every object alike: the object says what it has.
    func answerProperties(_ call: BusMethodCall, from peer: BusPeer) throws(SecretServiceError) -> [BusValue] {
        switch call.member {
        case "Get":
            try call.requireSignature("ss")
            let all = try properties(of: call.arguments[0].string ?? "", for: peer)
            let name = call.arguments[1].string ?? ""
            guard let value = all.first(where: { $0.0 == name })?.1 else {
                throw SecretServiceError(.unknownProperty, "No property \(name) at \(call.path)")
            }
            return [.variant(value)]
        case "GetAll":
            try call.requireSignature("s")
            return [.properties(try properties(of: call.arguments[0].string ?? "", for: peer))]
        case "Set":
            // The interface argument is not looked at: each object's writable names are unique to it.
            try call.requireSignature("ssv")
            try setProperty(call.arguments[1].string ?? "", to: call.arguments[2].unwrapped, by: peer)
            return []
        default:
            throw call.unknownMethod
        }
    }

    /// Refuses properties of an interface the object does not have.
    static func requireInterface(_ asked: String, is own: String) throws(SecretServiceError) {
        guard asked.isEmpty || asked == own else {
            throw SecretServiceError(.unknownProperty, "No interface \(asked) on this object")
        }
    }
}

extension BusMethodCall {
    /// Whether the call is for `interface`: D-Bus lets a caller name none, and the member decides.
    func isFor(_ interface: String) -> Bool {
        self.interface.isEmpty || self.interface == interface
    }

    /// Checks the signature before any argument is read, so that a method reads its arguments
    /// by position without asking each one's type again.
    func requireSignature(_ expected: String) throws(SecretServiceError) {
        guard signature == expected else {
            throw SecretServiceError(.invalidArgs, "\(member) takes (\(expected)), not (\(signature))")
        }
    }

    /// The answer to a method the object does not have.
    var unknownMethod: SecretServiceError {
        SecretServiceError(
            .unknownMethod, "No method \(interface.isEmpty ? "" : interface + ".")\(member)(\(signature)) at \(path)")
    }
}

extension SecretServiceError {
    static func readOnly(_ name: String) -> SecretServiceError {
        SecretServiceError(.propertyReadOnly, "The property \(name) cannot be set")
    }
}

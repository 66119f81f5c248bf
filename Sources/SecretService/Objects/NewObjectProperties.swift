import DBus
import FoundationEssentials
import TPMKeychain
import WireFormat

/// CreateCollection's properties, read in full before anything is created, so that one of the
/// wrong type is `InvalidArgs` and leaves no store behind.
struct NewCollectionProperties {
    static let labelProperty = "org.freedesktop.Secret.Collection.Label"

    /// For a collection whose unlock asks for a person: flag names joined by commas
    /// (`devicePasscode`, `biometryCurrentSet,or,devicePasscode`, `userPresence`).
    static let accessControlProperty = "org.tpmkeychain.Collection.AccessControl"

    /// The programs (absolute paths of executables) that may use the collection's items; the
    /// others get AccessDenied.
    static let allowedExecutablesProperty = "org.tpmkeychain.Collection.AllowedExecutables"

    /// For a collection whose every read of a secret is confirmed by the person first
    /// (`--confirm-command`): its items look locked to each caller until an Unlock prompt is
    /// confirmed, and the confirmation covers that caller's next read call.
    static let confirmEachAccessProperty = "org.tpmkeychain.Collection.ConfirmEachAccess"

    /// Nil when not given: the caller's alias, or "collection", stands in.
    let label: String?
    let accessControl: AccessControl?
    let allowedExecutables: [String]?
    let confirmsEachAccess: Bool

    /// - Throws: ``SecretServiceError`` `.invalidArgs` for the first property of the wrong type
    ///   or with an unknown value, in the order above.
    init(_ properties: [String: BusValue]) throws(SecretServiceError) {
        label = try stringProperty(properties[Self.labelProperty], named: Self.labelProperty)
        accessControl = try Self.accessControl(properties[Self.accessControlProperty]?.unwrapped)
        allowedExecutables = try Self.allowedExecutables(properties[Self.allowedExecutablesProperty]?.unwrapped)
        let confirmsProperty = properties[Self.confirmEachAccessProperty]?.unwrapped
        guard let confirms = confirmsProperty.map(\.bool) ?? false else {
            throw SecretServiceError(.invalidArgs, "\(Self.confirmEachAccessProperty) is a boolean")
        }
        confirmsEachAccess = confirms
    }

    /// Whether the store needs a properties item (what it protects with, who may use it), beyond
    /// a label.
    var needsPropertiesItem: Bool {
        accessControl != nil || allowedExecutables != nil || confirmsEachAccess
    }

    private static func allowedExecutables(_ value: BusValue?) throws(SecretServiceError) -> [String]? {
        guard let value else { return nil }
        guard case .array("s", let elements) = value, case let paths = elements.compactMap(\.string),
            !paths.isEmpty, paths.allSatisfy({ $0.hasPrefix("/") })
        else {
            throw SecretServiceError(
                .invalidArgs, "\(allowedExecutablesProperty) is a non-empty array of absolute paths")
        }
        return paths
    }

    private static func accessControl(_ value: BusValue?) throws(SecretServiceError) -> AccessControl? {
        guard let value else { return nil }
        guard let text = value.string else {
            throw SecretServiceError(.invalidArgs, "\(accessControlProperty) is a string")
        }
        let names: [String: AccessControl.Flags] = [
            "userPresence": .userPresence, "biometryAny": .biometryAny, "biometryCurrentSet": .biometryCurrentSet,
            "devicePasscode": .devicePasscode, "or": .or, "and": .and,
        ]
        var flags: AccessControl.Flags = []
        for name in text.split(separator: ",").map({ $0.trimmingWhitespace() }) {
            guard let flag = names[name] else {
                throw SecretServiceError(
                    .invalidArgs,
                    "\(accessControlProperty): unknown flag \"\(name)\"; use \(names.keys.sorted().joined(separator: ", "))"
                )
            }
            flags.insert(flag)
        }
        do {
            return try AccessControl(.whenUnlockedThisDeviceOnly, flags: flags)
        } catch {
            throw SecretServiceError(error)
        }
    }
}

/// CreateItem's properties.
struct NewItemProperties {
    static let labelProperty = "org.freedesktop.Secret.Item.Label"
    static let attributesProperty = "org.freedesktop.Secret.Item.Attributes"

    let label: String
    let attributes: [String: String]

    /// - Throws: ``SecretServiceError`` `.invalidArgs` when a name repeats, or the label or the
    ///   attributes are of the wrong type.
    init(_ argument: BusValue) throws(SecretServiceError) {
        guard let properties = argument.dictionary else {
            throw SecretServiceError(.invalidArgs, "CreateItem's properties repeat a name")
        }
        label = try stringProperty(properties[Self.labelProperty], named: Self.labelProperty) ?? ""
        guard
            let attributes = (properties[Self.attributesProperty]?.unwrapped ?? .stringDictionary([:]))
                .stringDictionary
        else { throw SecretServiceError(.invalidArgs, "\(Self.attributesProperty) is a{ss}") }
        self.attributes = attributes
    }
}

/// A property given as a string, or nil when it is not given.
///
/// - Throws: ``SecretServiceError`` `.invalidArgs` when it is given as anything else.
private func stringProperty(_ property: BusValue?, named name: String) throws(SecretServiceError) -> String? {
    guard let property else { return nil }
    guard let text = property.unwrapped.string else {
        throw SecretServiceError(.invalidArgs, "\(name) is a string")
    }
    return text
}

import DBus
import TPMKeychain

/// A failure a method call answers with: one of the error names the specification and its clients
/// know, and a message that says what to do.
struct SecretServiceError: Error {
    enum Name: String {
        case isLocked = "org.freedesktop.Secret.Error.IsLocked"
        case noSuchObject = "org.freedesktop.Secret.Error.NoSuchObject"
        case alreadyExists = "org.freedesktop.Secret.Error.AlreadyExists"
        case noSession = "org.freedesktop.Secret.Error.NoSession"
        case notSupported = "org.freedesktop.DBus.Error.NotSupported"
        case invalidArgs = "org.freedesktop.DBus.Error.InvalidArgs"
        case unknownMethod = "org.freedesktop.DBus.Error.UnknownMethod"
        case unknownObject = "org.freedesktop.DBus.Error.UnknownObject"
        case unknownProperty = "org.freedesktop.DBus.Error.UnknownProperty"
        case propertyReadOnly = "org.freedesktop.DBus.Error.PropertyReadOnly"
        case accessDenied = "org.freedesktop.DBus.Error.AccessDenied"
        case limitsExceeded = "org.freedesktop.DBus.Error.LimitsExceeded"
        case failed = "org.freedesktop.DBus.Error.Failed"
    }

    let name: Name
    let message: String

    init(_ name: Name, _ message: String) {
        self.name = name
        self.message = message
    }

    /// The store's error as the bus says it: a locked or protected item is `IsLocked`, a missing one
    /// `NoSuchObject`, bad input `InvalidArgs`, everything else `Failed` with the store's message.
    init(_ error: KeychainError) {
        switch error.code {
        case .interactionNotAllowed, .userCanceled, .authenticationFailed, .lockout:
            self.init(.isLocked, error.message)
        case .itemNotFound:
            self.init(.noSuchObject, error.message)
        case .duplicateItem:
            self.init(.alreadyExists, error.message)
        case .invalidParameter:
            self.init(.invalidArgs, error.message)
        default:
            self.init(.failed, error.message)
        }
    }

    var reply: BusReply { .error(name: name.rawValue, message: message) }
}

import Foundation
import SystemCalls

/// What an iOS app gets from its bundle, entitlements and device, and a Linux process has to be
/// told: the application identifier, the keychain access groups it may use, the store, and the
/// authenticators. SecurityCompat and LocalAuthenticationCompat read it; set it once at start-up
/// (or per test).
///
/// Defaults: the application identifier is `TPM_KEYCHAIN_APPLICATION_ID`, else the bundle
/// identifier, else the process name; the access groups are that identifier alone; the store is
/// `TPM_KEYCHAIN_SECITEM_STORE` (a path), else ``KeychainLocation/default``; no authenticator; no
/// passcode source.
public enum KeychainEnvironment {
    private struct Values: Sendable {
        var applicationIdentifier: String?
        var accessGroups: [String]?
        var location: KeychainLocation?
        var authenticator: (any Authenticator)?
        var passcode: PasscodeSource?
    }

    private static let values = Locked(Values())

    /// Scopes domain states and names the default access group.
    public static var applicationIdentifier: String {
        get {
            values.withLock { $0.applicationIdentifier }
                ?? ProcessInfo.processInfo.environment["TPM_KEYCHAIN_APPLICATION_ID"].flatMap { $0.isEmpty ? nil : $0 }
                ?? Bundle.main.bundleIdentifier ?? ProcessInfo.processInfo.processName
        }
        set { values.withLock { $0.applicationIdentifier = newValue } }
    }

    /// The access groups this process may use, as an app's keychain-access-groups entitlement: the
    /// first is where items without `kSecAttrAccessGroup` go; any other group is refused
    /// (errSecMissingEntitlement). Never empty: an empty list means the application identifier.
    public static var accessGroups: [String] {
        get {
            let groups = values.withLock { $0.accessGroups } ?? []
            return groups.isEmpty ? [applicationIdentifier] : groups
        }
        set { values.withLock { $0.accessGroups = newValue } }
    }

    /// The store SecItem calls use.
    public static var location: KeychainLocation {
        get {
            if let location = values.withLock({ $0.location }) { return location }
            if let path = ProcessInfo.processInfo.environment["TPM_KEYCHAIN_SECITEM_STORE"],
                let location = try? KeychainLocation(path: path)
            {
                return location
            }
            return .default
        }
        set { values.withLock { $0.location = newValue } }
    }

    /// The biometric authenticator of contexts made for a call (an `LAContext()`, a SecItem call
    /// without `kSecUseAuthenticationContext`).
    public static var authenticator: (any Authenticator)? {
        get { values.withLock { $0.authenticator } }
        set { values.withLock { $0.authenticator = newValue } }
    }

    /// Where such contexts get the device passcode.
    public static var passcode: PasscodeSource? {
        get { values.withLock { $0.passcode } }
        set { values.withLock { $0.passcode = newValue } }
    }

    /// A context as `LAContext()` makes one: this environment's authenticator, passcode source,
    /// application identifier and store.
    public static func makeContext() -> AuthenticationContext {
        AuthenticationContext(
            authenticator: authenticator, passcode: passcode, applicationIdentifier: applicationIdentifier,
            location: location)
    }

    /// Back to the defaults (tests).
    public static func reset() {
        values.withLock { $0 = Values() }
    }
}

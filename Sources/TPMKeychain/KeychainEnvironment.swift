import FoundationEssentials
import SystemCalls

/// What an iOS app gets from its bundle, entitlements and device, and a Linux process has to be
/// told: the application identifier, the keychain access groups it may use, the store, and the
/// authenticators. SecurityCompat and LocalAuthenticationCompat read it; set it once at start-up
/// (or per test).
///
/// What code sets wins; then the environment; then the app's entitlements file (``Entitlements``:
/// `TPM_KEYCHAIN_ENTITLEMENTS`, or the `.entitlements` file beside the executable), as iOS takes
/// them from the signed app, never from code; then these defaults: the application identifier is
/// `TPM_KEYCHAIN_APPLICATION_ID`, else the entitlements' application-identifier, else the bundle
/// identifier, else the process name; the access groups are the entitlements' (keychain access
/// groups, then the application identifier), else that identifier alone; the store is
/// `TPM_KEYCHAIN_SECITEM_STORE` (a path), else ``KeychainLocation/default``, on a simulated TPM
/// when `TPM_KEYCHAIN_ALLOW_SIMULATED=1` and there is no other; no authenticator; no passcode
/// source.
public enum KeychainEnvironment {
    private struct Values: Sendable {
        var applicationIdentifier: String?
        var accessGroups: [String]?
        var teamIdentifier: String?
        var location: KeychainLocation?
        var authenticator: (any Authenticator)?
        var passcode: PasscodeSource?
        /// The entitlements file as read (nil inside: none, or unreadable), once per process.
        var entitlements: Entitlements??
        var lastUnavailableReason: String?
        var lastStoreError: KeychainError?
    }

    private static let values = Locked(Values())

    /// Scopes domain states and names the default access group.
    public static var applicationIdentifier: String {
        get {
            values.withLock { $0.applicationIdentifier }
                ?? ProcessInfo.processInfo.environment["TPM_KEYCHAIN_APPLICATION_ID"].flatMap { $0.isEmpty ? nil : $0 }
                ?? entitlements?.applicationIdentifier
                ?? bundleIdentifier
        }
        set { values.withLock { $0.applicationIdentifier = newValue } }
    }

    /// The access groups this process may use, as an app's keychain-access-groups entitlement: the
    /// first is where items without `kSecAttrAccessGroup` go; any other group is refused
    /// (errSecMissingEntitlement). Never empty: an empty list means the entitlements file's groups,
    /// else the application identifier.
    public static var accessGroups: [String] {
        get {
            let groups = values.withLock { $0.accessGroups } ?? []
            if !groups.isEmpty { return groups }
            if let entitled = entitlements?.accessGroups, !entitled.isEmpty { return entitled }
            return [applicationIdentifier]
        }
        set { values.withLock { $0.accessGroups = newValue } }
    }

    /// The team identifier that `$(AppIdentifierPrefix)` and `$(TeamIdentifierPrefix)` stand for
    /// in an entitlements file: set here, else `TPM_KEYCHAIN_TEAM_ID`.
    public static var teamIdentifier: String? {
        get {
            values.withLock { $0.teamIdentifier }
                ?? ProcessInfo.processInfo.environment["TPM_KEYCHAIN_TEAM_ID"].flatMap { $0.isEmpty ? nil : $0 }
        }
        set {
            values.withLock { values in
                values.teamIdentifier = newValue
                values.entitlements = nil // read again with the new team
            }
        }
    }

    /// The entitlements file's contents, read once (again after ``reset()`` or a new
    /// ``teamIdentifier``); nil without one. A file that cannot be used is reported through the
    /// store location's logger and ignored.
    public static var entitlements: Entitlements? {
        if let read = values.withLock({ $0.entitlements }) { return read }
        var read: Entitlements?
        if let path = Entitlements.discoveredPath() {
            do {
                read = try Entitlements(
                    contentsOf: path, teamIdentifier: teamIdentifier, bundleIdentifier: bundleIdentifier)
            } catch {
                location.logger.error("Ignoring the entitlements file: \(error.message)")
            }
        }
        values.withLock { $0.entitlements = .some(read) }
        return read
    }

    private static var bundleIdentifier: String {
        ProcessInfo.processInfo.environment["TPM_KEYCHAIN_BUNDLE_ID"].flatMap { $0.isEmpty ? nil : $0 }
            ?? ProcessInfo.processInfo.processName
    }

    /// Why the last SecItem or SecKey call that answered errSecNotAvailable found no TPM or store:
    /// what was tried (a hardware TPM, `TPM_KEYCHAIN_TCTI`, a store's simulator) and what to do.
    /// Also logged at error level through ``location``'s logger.
    public static var lastUnavailableReason: String? {
        values.withLock { $0.lastUnavailableReason }
    }

    /// The error behind the last SecItem or SecKey call that failed, in any thread: a result code
    /// keeps the kind of failure, not its cause ("I/O error" for a store this user may not open).
    /// For a single-threaded tool (the CLI's key verbs) that reports more than the code.
    package static var lastStoreError: KeychainError? {
        values.withLock { $0.lastStoreError }
    }

    /// Records the error behind a failed SecItem or SecKey call (SecurityCompat).
    package static func recordStoreError(_ error: KeychainError) {
        values.withLock { $0.lastStoreError = error }
    }

    /// Records why a call found no TPM (SecurityCompat, when it answers errSecNotAvailable).
    public static func recordUnavailable(_ error: KeychainError) {
        values.withLock { $0.lastUnavailableReason = error.message }
        location.logger.error("No keychain is available: \(error.message)")
    }

    /// Puts SecItem calls (and `LAContext()`'s) on a store of their own with a simulated TPM, as
    /// the iOS Simulator gives tests a keychain: one line in a test's set-up. The store lives in
    /// `directory` (by default a new temporary one) and swtpm is started when it is first used;
    /// nothing in it is bound to hardware.
    ///
    /// - Throws: ``KeychainError`` `.invalidParameter` for an unusable directory.
    @discardableResult
    public static func useSimulatedTPM(directory: String? = nil) throws(KeychainError) -> KeychainLocation {
        let path =
            directory ?? (FileManager.default.temporaryDirectory.path + "/tpm-keychain-simulated-" + UUID().uuidString)
        let location = try KeychainLocation(path: path, tpm: .automaticOrSimulated)
        self.location = location
        return location
    }

    /// The store SecItem calls use.
    public static var location: KeychainLocation {
        get {
            if let location = values.withLock({ $0.location }) { return location }
            let tpm: TPMChoice = StoreTPM.simulationAllowedByEnvironment ? .automaticOrSimulated : .automatic
            if let path = ProcessInfo.processInfo.environment["TPM_KEYCHAIN_SECITEM_STORE"],
                let location = try? KeychainLocation(path: path, tpm: tpm)
            {
                return location
            }
            let standard = KeychainLocation.default
            return tpm == .automatic ? standard : (try? KeychainLocation(path: standard.path, tpm: tpm)) ?? standard
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

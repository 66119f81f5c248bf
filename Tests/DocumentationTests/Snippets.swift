// swift-format-ignore-file
// (Formatted as the docs are: each block is the docs' text, verbatim.)
// Every ```swift block of README.md, docs/RECIPES.md and docs/PORTING.md, verbatim, in code the compiler checks
// (and, for the test recipes, runs). SnippetTests fails when a block in the docs is not here, so
// the two cannot drift apart. Blocks that need context are wrapped in functions; nothing calls
// those that would touch the user's real store.

import Foundation
import Testing
import TPM
import KeychainStorageCompat
import TPMKeychain
import TPMKeychainFprintd
import TPMKeychainTesting

struct Session: Codable {
    var jwt: String
}

struct TokenResponse {
    var accessToken: String
    var refreshToken: String
}

// MARK: README.md

/// Stands for an application's own passcode dialog.
func askForPasscode(_ reason: String) async -> String? { nil }

func readmeAccessControl(refreshToken: String) async throws {
    let keychain = try Keychain(service: "com.example.bank")
    let context = AuthenticationContext(authenticator: FprintdAuthenticator(),
                                        passcode: .prompt { reason in await askForPasscode(reason) })
    context.localizedReason = "sign in to your bank"
    context.allowableReuseDuration = .seconds(60)

    let control = try AccessControl(.whenUnlockedThisDeviceOnly, flags: [.biometryCurrentSet, .or, .devicePasscode])
    try await keychain.set(refreshToken, forKey: "refreshToken", accessControl: control, context: context)
    let token: String? = try await keychain.get("refreshToken", context: context)
    _ = token
}

func readmeUseItFromSwift(token: String, session: Session) throws {
    let keychain = try Keychain(service: "com.example.api")

    try keychain.set(token, forKey: "accessToken")                  // store (upsert)
    let accessToken = try keychain.string(forKey: "accessToken")    // read from any thread; nil if absent
    try keychain.set(session, forKey: "session")                    // any Codable value
    let restored = try keychain.get("session", as: Session.self)
    let loggedIn = try keychain.contains("session")                 // without decrypting the secret
    try keychain.set(nil as String?, forKey: "accessToken")         // nil removes the item
    try keychain.removeAll()                                        // logout: clear the service
    _ = (accessToken, restored, loggedIn)
}

@Test func remembersTheToken() throws {
    let simulator = try SoftwareTPM.start()                  // private swtpm, stopped by PID
    defer { simulator.stop() }
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent(UUID().uuidString).path
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let location = try KeychainLocation(path: directory + "/keychain", tcti: simulator.tcti)
    defer { Keychain.closeStore(location) }                  // erase the keys before the TPM goes

    let keychain = try Keychain(service: "com.example.tests", location: location)
    try keychain.set("t0k3n", forKey: "accessToken")
    #expect(try keychain.string(forKey: "accessToken") == "t0k3n")
}

@Test func readmeSealsWithThePINOnASimulator() throws {
    let simulator = try SoftwareTPM.start()
    defer { simulator.stop() }
    let tpm = try TPMConnection(TPMConfiguration(tcti: simulator.tcti))
    defer { tpm.close() }
    let (key, sealed) = try tpm.generateSealedKey(authValue: SecretBytes(copying: Array("1234".utf8)))
    #expect(try tpm.unseal(sealed, authValue: SecretBytes(copying: Array("1234".utf8))) == key)
}

// MARK: docs/RECIPES.md

func recipesFirstKeychain() throws {
    let keychain = try Keychain(service: "com.example.app")
    _ = keychain
}

enum Secrets {
    static let keychain = Keychain(literalService: "com.example.app")
}

func recipesTokens(keychain: Keychain, response: TokenResponse) throws {
    try keychain.set(response.accessToken, forKey: "accessToken")
    try keychain.set(response.refreshToken, forKey: "refreshToken")

    let accessToken = try keychain.string(forKey: "accessToken")   // nil when logged out

    // Logout: remove every item of the service.
    try keychain.removeAll()
    _ = accessToken
}

func recipesNilRemoves(keychain: Keychain) throws {
    let maybeToken: String? = nil
    try keychain.set(maybeToken, forKey: "accessToken")             // removes the item
}

func recipesCodableSession(keychain: Keychain, jwt: String, expiry: Date, x: Data, y: Data, address: String) throws {
    struct Session: Codable {
        var jwt: String
        var expiresAt: Date
        var publicKeyX: Data          // P-256 public-key coordinates
        var publicKeyY: Data
        var walletAddress: String
    }

    let session = Session(jwt: jwt, expiresAt: expiry, publicKeyX: x, publicKeyY: y, walletAddress: address)
    try keychain.set(session, forKey: "session")                 // stored as JSON, encrypted
    if try keychain.contains("session") { print("logged in") }  // no decryption of the secret
    let restored = try keychain.get("session", as: Session.self) // nil if absent
    _ = restored
}

func recipesAnyThread() async throws {
    let keychain = try Keychain(service: "com.example.api")   // Sendable: capture it anywhere
    await withTaskGroup(of: String?.self) { group in
        for _ in 0..<8 { group.addTask { try? keychain.string(forKey: "accessToken") } }
    }
}

func recipesSmallValues(keychain: Keychain) throws {
    try keychain.set(true, forKey: "biometricsEnabled")
    try keychain.set(3, forKey: "failedLogins")
    let enabled = try keychain.bool(forKey: "biometricsEnabled")    // Bool?
    let failures = try keychain.int(forKey: "failedLogins")         // Int?
    let name = try keychain["displayName"]                          // String?, read-only subscript
    _ = (enabled, failures, name)
}

func recipesAttributes(keychain: Keychain, password: String) throws {
    try keychain.set(password, forKey: "alice@example.com", label: "Example mail", comment: "IMAP",
                     accessibility: .afterFirstUnlockThisDeviceOnly)
    let attributes = try keychain.attributes(forKey: "alice@example.com")   // no secret decrypted
    print(attributes?.label as Any, attributes?.creationDate as Any, attributes?.modificationDate as Any)
    let accounts = try keychain.allKeys()                                    // in creation order
    try keychain.updateAttributes(forKey: "alice@example.com", removing: [.comment])
    _ = accounts
}

func recipesLocations() throws {
    let standard = KeychainLocation.default                           // ~/.local/share/tpm-keychain/default
    let work = try KeychainLocation.named("work")                     // ~/.local/share/tpm-keychain/work
    let service = try KeychainLocation(path: "/var/lib/myservice/keychain")
    let pinned = try KeychainLocation(path: "/var/lib/myservice/keychain", tcti: "device:/dev/tpmrm0")
    let devBox = try KeychainLocation(path: "/home/me/dev-keychain", tpm: .automaticOrSimulated)
    let keychain = try Keychain(service: "com.example.app", location: work)
    _ = (standard, service, pinned, devBox, keychain)
}

final class TestKeychain {
    let simulator: SoftwareTPM
    let directory: String
    let location: KeychainLocation

    init() throws {
        simulator = try SoftwareTPM.start()
        directory = FileManager.default.temporaryDirectory.appendingPathComponent(UUID().uuidString).path
        location = try KeychainLocation(path: directory + "/keychain", tcti: simulator.tcti)
    }

    func keychain(_ service: String) throws -> Keychain {
        try Keychain(service: service, location: location)
    }

    deinit {
        Keychain.closeStore(location)
        simulator.stop()
        try? FileManager.default.removeItem(atPath: directory)
    }
}

@Test func logoutClearsTheTokens() throws {
    let test = try TestKeychain()
    let keychain = try test.keychain("com.example.tests")
    try keychain.set("access", forKey: "accessToken")
    try keychain.set("refresh", forKey: "refreshToken")
    #expect(try keychain.removeAll() == 2)
    #expect(try keychain.string(forKey: "accessToken") == nil)
}

// MARK: docs/PORTING.md

final class TokenStore: Sendable {
    private let keychain: Keychain

    init(service: String) throws {
        keychain = try Keychain(service: service)
    }

    func save(_ token: Data, account: String) throws { try keychain.set(token, forKey: account) }
    func read(account: String) throws -> Data? { try keychain.data(forKey: account) }
    func delete(account: String) throws { try keychain.remove(account) }
    func logout() throws { try keychain.removeAll() }
}

// MARK: docs/PORTING.md (SecurityCompat)

func configureKeychain() throws {
    KeychainEnvironment.applicationIdentifier = "com.example.app"          // scopes domain states
    KeychainEnvironment.accessGroups = ["TEAMID.com.example.app",          // the default group
                                        "TEAMID.com.example.shared"]       // others allowed
    KeychainEnvironment.location = try KeychainLocation(path: "/var/lib/example/keychain")
    KeychainEnvironment.authenticator = FprintdAuthenticator()             // what LAContext() uses
}

func giveTestsASimulatedTPM() throws {
    try KeychainEnvironment.useSimulatedTPM()
}

// MARK: docs/PORTING.md (KeychainStorageCompat)

func storeSession(token: Data, password: String, newPassword: String) throws {
    let cipher = try Cipher(password: password, salt: "com.example.app")
    let storage = try KeychainStorage.storeExists(name: "session")
        ? KeychainStorage.openStore(name: "session", cipher: cipher)
        : KeychainStorage.createStore(name: "session", cipher: cipher)
    try storage.put(data: token, for: "token")
    let stored = try storage.data(for: "token")
    try storage.changeCipher(to: try Cipher(password: newPassword, salt: "com.example.app"))
    _ = (stored, try storage.keys())
}

import Foundation
import KeychainVocabulary
import SystemCalls
import TPMKeychain

/// Why a KeychainStorage call failed, a case for each failure SAP's documentation names.
public enum KeychainStorageError: Error, Sendable, Equatable, CustomStringConvertible {
    /// `createStore` for a name (and access group) that exists.
    case storeAlreadyExists(String)
    /// `openStore` or `removeStore` for a name that does not exist.
    case storeNotFound(String)
    /// An empty name, one with `/` or NUL, or `.`/`..`.
    case invalidName(String)
    /// The cipher given does not open the store (another password, or none where one is needed).
    case wrongCipher(String)
    /// A cipher could not be made (empty password or salt).
    case invalidCipher(String)
    case encryptionFailed(String)
    case decryptionFailed(String)
    /// The store was removed, by this process or another.
    case storeRemoved(String)
    /// The keychain beneath failed: the code and message of its `KeychainError`.
    case keychain(code: String, message: String)

    public var description: String {
        switch self {
        case .storeAlreadyExists(let name): "A store named \"\(name)\" already exists"
        case .storeNotFound(let name): "No store named \"\(name)\""
        case .invalidName(let message), .wrongCipher(let message), .invalidCipher(let message),
            .encryptionFailed(let message),
            .decryptionFailed(let message), .storeRemoved(let message):
            message
        case .keychain(let code, let message): "\(message) (\(code))"
        }
    }

    init(_ error: KeychainError) {
        self = .keychain(code: error.code.name, message: error.message)
    }
}

/// SAP's DataStoring: keyed data.
public protocol DataStoring {
    func put(data: Data, for key: String) throws
    func data(for key: String) throws -> Data?
    func removeData(for key: String) throws
    func removeAllData() throws
    func keys() throws -> Set<String>
}

/// SAP's KeychainStorage on the TPM store: a named store (its own directory and TPM-sealed keys),
/// optionally with a ``Ciphering`` as a second key over every value. Every instance method is
/// safe from many threads; ``changeCipher(to:)`` is one crash-safe transaction.
///
/// Stores live under ``rootDirectory`` (`$XDG_DATA_HOME/tpm-keychain/stores`, or
/// `TPM_KEYCHAIN_STORAGE_ROOT`): `<root>/private/<name>` or `<root>/groups/<access group>/<name>`.
/// The TPM is chosen as for every store (`TPM_KEYCHAIN_TCTI`, the store's own simulator, the
/// hardware TPM).
///
/// Layout inside a store (docs/FORMAT.md, "KeychainStorage"): generic passwords of service
/// `KeychainStorage`: the account `.meta` holds the generation and a verifier (a known text
/// encrypted with the cipher, so that a wrong password is told apart from damage); the values of
/// generation G are the accounts of service `KeychainStorage.g<G>`. A cipher change writes
/// generation G+1 in full, then switches `.meta` (one atomic file replace: the commit), then
/// removes generation G: a crash leaves every item readable with exactly one of the two ciphers.
public final class KeychainStorage: DataStoring, @unchecked Sendable {
    /// The store's name (UTF-8).
    public let name: String
    /// The access group the store is shared through ("" for none).
    public let accessGroup: String

    /// The store's cipher; change it with ``changeCipher(to:)``.
    public var cipher: any Ciphering { state.withLock { $0.cipher } }

    struct State {
        var cipher: any Ciphering
        var generation: Int
        var removed = false
    }

    let state: Locked<State>
    private let location: KeychainLocation
    /// Serialises this instance's cipher changes against its own writes (other processes: the
    /// store's `keychainstorage.lock`).
    private let changing = NSLock()

    static let metaService = "KeychainStorage"
    static let metaAccount = ".meta"
    static let verifierText = Data("TPMKeychain KeychainStorage verifier v1".utf8)

    private init(name: String, accessGroup: String, location: KeychainLocation, cipher: any Ciphering, generation: Int)
    {
        self.name = name
        self.accessGroup = accessGroup
        self.location = location
        state = Locked(State(cipher: cipher, generation: generation))
    }

    // MARK: Stores

    /// Where stores are kept: `TPM_KEYCHAIN_STORAGE_ROOT`, else `<data directory>/stores`.
    public static var rootDirectory: String {
        get {
            root.withLock { $0 } ?? ProcessInfo.processInfo.environment["TPM_KEYCHAIN_STORAGE_ROOT"] ?? KeychainLocation
                .dataDirectory + "/stores"
        }
        set { root.withLock { $0 = newValue } }
    }

    private static let root = Locked<String?>(nil)

    /// Whether a store may be created with a simulated TPM of its own when no TPM is usable (the
    /// hardware TPM is not accessible to this user and `TPM_KEYCHAIN_TCTI` is not set). Off unless
    /// `TPM_KEYCHAIN_ALLOW_SIMULATED=1`: a simulated TPM keeps its seeds next to the store, so a copy
    /// of the directory opens it. Without it, creating a store then fails with
    /// ``KeychainStorageError/keychain(code:message:)`` (`tpmUnavailable`) saying what to do. Stores created
    /// with one keep it.
    public static var allowsSimulatedTPM: Bool {
        get { simulated.withLock { $0 } ?? StoreTPM.simulationAllowedByEnvironment }
        set { simulated.withLock { $0 = newValue } }
    }

    private static let simulated = Locked<Bool?>(nil)

    /// The access group string for a keychain group, as SAP's helper makes it.
    public static func accessGroup(from keychainGroup: String) -> String { keychainGroup }

    /// Creates a store and opens it.
    ///
    /// - Throws: ``KeychainStorageError/storeAlreadyExists(_:)``, ``KeychainStorageError/invalidName(_:)``, `.keychain`.
    public class func createStore(
        name: String, cipher: (any Ciphering)? = nil, accessGroup: String = ""
    ) throws -> KeychainStorage {
        let location = try location(name: name, accessGroup: accessGroup)
        guard !location.storeExists else { throw KeychainStorageError.storeAlreadyExists(name) }
        let storage = KeychainStorage(
            name: name, accessGroup: accessGroup, location: location, cipher: cipher ?? PlainCipher(), generation: 1)
        let verifier = try cipher.map { try $0.encrypt(verifierText) }
        try storage.writeMeta(generation: 1, verifier: verifier, kdf: (cipher as? Cipher)?.parameters, mode: .add)
        return storage
    }

    /// Opens a store.
    ///
    /// - Throws: ``KeychainStorageError/storeNotFound(_:)``, ``KeychainStorageError/wrongCipher(_:)``,
    ///   ``KeychainStorageError/invalidName(_:)``, `.keychain`.
    public class func openStore(
        name: String, cipher: (any Ciphering)? = nil, accessGroup: String = ""
    ) throws -> KeychainStorage {
        let location = try location(name: name, accessGroup: accessGroup)
        guard location.storeExists else { throw KeychainStorageError.storeNotFound(name) }
        let storage = KeychainStorage(
            name: name, accessGroup: accessGroup, location: location, cipher: cipher ?? PlainCipher(), generation: 0)
        let meta = try storage.readMeta()
        if let recorded = meta.kdf, let given = (cipher as? Cipher)?.parameters, recorded != given {
            throw KeychainStorageError.wrongCipher(
                "The store \"\(name)\" was encrypted with scrypt N = \(recorded.rounds), r = \(recorded.blockSize), p = \(recorded.parallelism), and this Cipher uses N = \(given.rounds), r = \(given.blockSize), p = \(given.parallelism): make it with Cipher(password:salt:parameters:) and the store's parameters"
            )
        }
        try verify(cipher, against: meta.verifier, name: name)
        storage.state.withLock { $0.generation = meta.generation }
        try storage.removeStaleGenerations(keeping: meta.generation)
        return storage
    }

    /// Whether a store exists, without the TPM.
    ///
    /// - Throws: ``KeychainStorageError/invalidName(_:)``.
    public class func storeExists(name: String, accessGroup: String = "") throws -> Bool {
        try location(name: name, accessGroup: accessGroup).storeExists
    }

    /// Removes a store: its keys are erased from this process's memory and its files deleted.
    /// Other stores are untouched; instances of it (here or in other processes) fail from then on.
    ///
    /// - Throws: ``KeychainStorageError/storeNotFound(_:)``, ``KeychainStorageError/invalidName(_:)``.
    public class func removeStore(name: String, accessGroup: String = "") throws {
        let location = try location(name: name, accessGroup: accessGroup)
        guard location.storeExists else { throw KeychainStorageError.storeNotFound(name) }
        do {
            try location.removeStore()
        } catch {
            throw KeychainStorageError(error)
        }
    }

    /// The names of the stores of an access group ("" for the private ones).
    public class func storeNames(accessGroup: String = "") throws -> [String] {
        let directory = try groupDirectory(accessGroup)
        return KeychainLocation.storeNames(in: directory)
    }

    static func groupDirectory(_ accessGroup: String) throws -> String {
        if accessGroup.isEmpty { return rootDirectory + "/private" }
        try validate(accessGroup, what: "access group")
        return rootDirectory + "/groups/" + accessGroup
    }

    static func location(name: String, accessGroup: String) throws -> KeychainLocation {
        try validate(name, what: "store name")
        do {
            // The hardware TPM; a simulated one kept with the store only when allowed.
            return try KeychainLocation(
                path: try groupDirectory(accessGroup) + "/" + name,
                tpm: allowsSimulatedTPM ? .automaticOrSimulated : .automatic)
        } catch let error as KeychainError {
            throw KeychainStorageError.invalidName(error.message)
        }
    }

    static func validate(_ text: String, what: String) throws {
        guard !text.isEmpty, text != ".", text != "..", !text.hasPrefix("."), !text.contains("/"),
            !text.utf8.contains(0),
            text.utf8.count <= 255
        else {
            throw KeychainStorageError.invalidName(
                "A \(what) is 1 to 255 bytes of UTF-8 without \"/\" or NUL, not starting with \".\": \"\(text)\"")
        }
    }

    static func verify(_ cipher: (any Ciphering)?, against verifier: Data?, name: String) throws {
        switch (cipher, verifier) {
        case (nil, nil):
            return
        case (nil, .some):
            throw KeychainStorageError.wrongCipher("The store \"\(name)\" is encrypted with a cipher; open it with one")
        case (.some, nil):
            throw KeychainStorageError.wrongCipher("The store \"\(name)\" has no cipher; open it without one")
        case (.some(let cipher), .some(let verifier)):
            guard (try? cipher.decrypt(verifier)) == verifierText else {
                throw KeychainStorageError.wrongCipher(
                    "The cipher does not open the store \"\(name)\" (wrong password or salt)")
            }
        }
    }

    // MARK: Support

    func current() throws -> (any Ciphering, Keychain) {
        let (cipher, generation, removed) = state.withLock { ($0.cipher, $0.generation, $0.removed) }
        guard !removed, location.storeExists else {
            state.withLock { $0.removed = true }
            throw KeychainStorageError.storeRemoved("The store \"\(name)\" was removed")
        }
        return (cipher, try keychain(generation))
    }

    func keychain(_ generation: Int) throws -> Keychain {
        try keychainCall {
            try Keychain(service: Self.metaService + ".g\(generation)", location: location).acting(
                for: .keychainStorage)
        }
    }

    /// Re-reads the generation; true when it changed (and the cipher still opens it).
    func refreshGeneration() throws -> Bool {
        let meta = try readMeta()
        let (cipher, generation) = state.withLock { ($0.cipher, $0.generation) }
        guard meta.generation != generation else { return false }
        try Self.verify(cipher is PlainCipher ? nil : cipher, against: meta.verifier, name: name)
        state.withLock { $0.generation = meta.generation }
        return true
    }

    struct Meta: Codable {
        var generation: Int
        var verifier: Data?
        /// The scrypt parameters of the store's `Cipher` (absent for another `Ciphering`, or none).
        var kdf: Cipher.Parameters?
    }

    func readMeta() throws -> Meta {
        let keychain = try keychainCall {
            try Keychain(service: Self.metaService, location: location).acting(for: .keychainStorage)
        }
        guard let meta = try keychainCall({ try keychain.get(Self.metaAccount, as: Meta.self) }) else {
            throw KeychainStorageError.storeNotFound(name)
        }
        return meta
    }

    enum MetaWrite { case add, update }

    func writeMeta(generation: Int, verifier: Data?, kdf: Cipher.Parameters?, mode: MetaWrite) throws {
        let keychain = try keychainCall {
            try Keychain(service: Self.metaService, location: location).acting(for: .keychainStorage)
        }
        let meta = Meta(generation: generation, verifier: verifier, kdf: kdf)
        try keychainCall {
            switch mode {
            case .add: try keychain.add(meta, forKey: Self.metaAccount)
            case .update: try keychain.set(meta, forKey: Self.metaAccount)
            }
        }
    }

    /// Generations other than the current one: what a change killed before or after its commit left.
    func removeStaleGenerations(keeping generation: Int) throws {
        for stale in [generation - 1, generation + 1] where stale > 0 {
            _ = try keychainCall { try keychain(stale).removeAll() }
        }
    }

    /// Writers hold the store's `keychainstorage.lock` shared, a cipher change exclusively, across
    /// processes; within this process `changing` orders them too.
    func withStoreLock<R>(exclusive: Bool, _ body: () throws -> R) throws -> R {
        guard location.storeExists else {
            state.withLock { $0.removed = true }
            throw KeychainStorageError.storeRemoved("The store \"\(name)\" was removed")
        }
        changing.lock()
        defer { changing.unlock() }
        let lock: LockFile
        do {
            lock = try LockFile(location.path + "/keychainstorage.lock")
            guard try lock.lock(timeout: .seconds(60), shared: !exclusive) else {
                throw KeychainStorageError.keychain(
                    code: KeychainError.Code.timedOut.name,
                    message: "Another process held the store \"\(name)\" for more than 60 s")
            }
        } catch let error as KeychainStorageError {
            throw error
        } catch {
            throw KeychainStorageError.keychain(
                code: KeychainError.Code.storageFailed.name, message: "Cannot lock the store \"\(name)\": \(error)")
        }
        return try withExtendedLifetime(lock) { try body() }
    }

    func keychainCall<R>(_ body: () throws -> R) throws -> R {
        do {
            return try body()
        } catch let error as KeychainError {
            if error.code == .storeNotFound {
                state.withLock { $0.removed = true }
                throw KeychainStorageError.storeRemoved("The store \"\(name)\" was removed")
            }
            throw KeychainStorageError(error)
        }
    }
}

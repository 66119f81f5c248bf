import Foundation
import KeychainStore

/// Where a keychain store lives and which TPM seals its master key.
public struct KeychainLocation: Sendable, Hashable {
    /// The store's directory (absolute).
    public let path: String
    /// The TPM as a TCTI string; nil means `TPM_KEYCHAIN_TCTI`, else `device:/dev/tpmrm0`.
    public let tcti: String?

    /// - Parameters:
    ///   - path: an absolute directory path; created (mode 0700) on first use.
    ///   - tcti: for example `swtpm:host=127.0.0.1,port=2321`; nil uses the environment's choice.
    public init(path: String, tcti: String? = nil) {
        self.path = (path as NSString).standardizingPath
        self.tcti = tcti
    }

    /// The store named `name` under `$XDG_DATA_HOME/tpm-keychain`, else `~/.local/share/tpm-keychain`.
    public static func named(_ name: String, tcti: String? = nil) -> KeychainLocation {
        KeychainLocation(path: dataDirectory + "/" + name, tcti: tcti)
    }

    /// The store every `Keychain` uses unless told otherwise: `named("default")`.
    public static var `default`: KeychainLocation { named("default") }

    /// Whether a store was ever created here; answers without opening it or touching the TPM.
    /// False also when the location cannot be read or holds a damaged store: ``checkStore()``
    /// says which.
    public var storeExists: Bool { (try? ItemStore.presence(at: path)) == .present }

    /// Checks, without the TPM, that a usable store exists here.
    ///
    /// - Throws: ``KeychainError`` `.storeNotFound` when there is none, `.tampered` for a store
    ///   whose metadata is gone, `.permissionDenied`, `.unsafeFileSystem`, `.invalidParameter`
    ///   for a directory that holds something else.
    public func checkStore() throws(KeychainError) {
        guard try ItemStore.presence(at: path) == .present else {
            throw KeychainError(.storeNotFound, "No keychain store at \(path)")
        }
    }

    /// `$XDG_DATA_HOME/tpm-keychain`, else `~/.local/share/tpm-keychain`; worked out once per process.
    public static var dataDirectory: String { resolvedDataDirectory }

    private static let resolvedDataDirectory: String = {
        let environment = ProcessInfo.processInfo.environment
        if let data = environment["XDG_DATA_HOME"], data.hasPrefix("/") {
            return data + "/tpm-keychain"
        }
        // $HOME first: NSHomeDirectory() asks the user database (NSS, /etc/passwd) on every call.
        let home = environment["HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil } ?? NSHomeDirectory()
        return home + "/.local/share/tpm-keychain"
    }()
}

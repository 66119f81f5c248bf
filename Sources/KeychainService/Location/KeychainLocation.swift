import FoundationEssentials
import KeychainStore
public import KeychainVocabulary
public import Logging
import SystemCalls

#if canImport(Glibc)
import Glibc
#endif

/// Where a keychain store lives and which TPM seals its master key.
///
/// ```swift
/// let location = KeychainLocation.default                                   // ~/.local/share/tpm-keychain/default
/// let work = try KeychainLocation.named("work")                              // a second store beside it
/// let custom = try KeychainLocation(path: "/var/lib/myservice/keychain")     // anywhere (absolute)
/// let test = try KeychainLocation(path: directory, tcti: simulator.tcti)     // a TPM of your choice
/// ```
public struct KeychainLocation: Sendable, Hashable, CustomStringConvertible {
    /// The store's directory (absolute, normalised).
    public let path: String
    /// How the TPM is found: see ``TPMChoice``.
    public private(set) var tpm: TPMChoice
    /// Where the device's state lives (its passcode key, last-seen enrollment; docs/FORMAT.md,
    /// "Device state"), shared by the user's stores on one TPM. nil chooses: `TPM_KEYCHAIN_DEVICE_DIR`
    /// when set; `<store>/device` for a store with its own simulated TPM; else
    /// `$XDG_STATE_HOME/tpm-keychain/device-<TPM>` (or `~/.local/state/...`), one per TPM.
    /// Not part of equality.
    public var deviceDirectory: String?
    /// The login session's lock state, checked before whenUnlocked items are read (nil: only the
    /// keychain's own lock counts). Not part of equality.
    public var sessionLock: (any SessionLockState)?
    /// Where the TPM layer logs while it opens this store (debug level; never secrets or item
    /// names). Dropped unless you set one. Not part of equality.
    public var logger: Logger = .disabled

    /// The TCTI given in code or chosen already, if any.
    public var tcti: String? {
        switch tpm {
        case .tcti(let tcti): tcti
        case .chosen(let tpm): tpm.configuration.tcti
        case .automatic, .automaticOrSimulated: nil
        }
    }

    /// A store at `path`, sealed to the TPM that `tcti` names, or to the one
    /// ``TPMChoice/automatic`` finds.
    ///
    /// - Parameters:
    ///   - path: an absolute directory path; the store is created there (mode 0700) on first use.
    ///   - tcti: for example `swtpm:host=127.0.0.1,port=2321`; nil chooses ``TPMChoice/automatic``.
    /// - Throws: ``KeychainError`` `.invalidParameter` for a relative or empty path, or a path
    ///   that is not UTF-8 text without NUL.
    public init(path: String, tcti: String? = nil) throws(KeychainError) {
        try self.init(path: path, tpm: tcti.map { .tcti($0) } ?? .automatic)
    }

    /// A store at `path`, sealed to the TPM that `tpm` finds.
    ///
    /// - Parameters:
    ///   - path: an absolute directory path; the store is created there (mode 0700) on first use.
    ///   - tpm: how the TPM is found.
    /// - Throws: ``KeychainError`` `.invalidParameter` for a relative or empty path.
    public init(path: String, tpm: TPMChoice) throws(KeychainError) {
        guard path.hasPrefix("/"), !path.utf8.contains(0) else {
            throw KeychainError(.invalidParameter, "A keychain location needs an absolute path, not \"\(path)\"")
        }
        self.init(validatedPath: path, tpm: tpm)
    }

    private init(validatedPath path: String, tpm: TPMChoice) {
        self.path = Self.normalized(path)
        self.tpm = tpm
    }

    /// `path` with `.`, `..` and symbolic links resolved, also where its last components do not
    /// exist yet (a store about to be created): what Foundation's `standardizingPath` gave.
    ///
    /// Normalising walks the path with a readlink per component: a few microseconds each. A tool normalises the path it is given and then makes its
    /// location from the result, so a result this process made lately is recognised and returned
    /// as is: normalising it again would give it back (it has no `.`, `..` or link left, unless
    /// one was made since, which a second walk a moment later could miss as well).
    package static func normalized(_ path: String) -> String {
        if lastNormalized.withLock({ $0.contains(path) }) { return path }
        let result = resolvingLinks(path)
        lastNormalized.withLock { recent in
            if recent.count == 8 { recent.removeFirst() }
            recent.append(result)
        }
        return result
    }

    /// The walk of ``normalized(_:)``: each component in turn, `..` taking away the last one
    /// resolved (so `link/..` is the parent of the link's target, as the kernel has it), a
    /// symbolic link replaced by its target. At most 40 links, as the kernel follows; past them
    /// the rest is kept as written, and opening it fails as it would have.
    static func resolvingLinks(_ path: String) -> String {
        let absolute = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
        var resolved: [Substring] = []
        var pending = Array(absolute.split(separator: "/").reversed())
        var links = 0
        var target = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        while let component = pending.popLast() {
            if component == "." { continue }
            if component == ".." {
                _ = resolved.popLast()
                continue
            }
            resolved.append(component)
            guard links < 40 else { continue }
            let length = readlink("/" + resolved.joined(separator: "/"), &target, target.count - 1)
            guard length > 0 else { continue }
            links += 1
            resolved.removeLast()
            let destination = String(decoding: target[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
            if destination.hasPrefix("/") { resolved.removeAll() }
            pending.append(contentsOf: destination.split(separator: "/").reversed())
        }
        return "/" + resolved.joined(separator: "/")
    }

    /// The last few paths ``normalized(_:)`` returned.
    private static let lastNormalized = Locked<[String]>([])

    /// This location with `tpm` chosen instead: the path as it was normalised already, without
    /// the walk over its symbolic links that normalising takes again.
    package func choosing(_ tpm: TPMChoice) -> KeychainLocation {
        var location = self
        location.tpm = tpm
        return location
    }

    /// The store named `name` under `$XDG_DATA_HOME/tpm-keychain`, else `~/.local/share/tpm-keychain`.
    ///
    /// - Throws: ``KeychainError`` `.invalidParameter` for an empty name or one with `/`, NUL, or
    ///   that is `.` or `..`.
    public static func named(_ name: String, tcti: String? = nil) throws(KeychainError) -> KeychainLocation {
        guard !name.isEmpty, name != ".", name != "..", !name.contains("/"), !name.utf8.contains(0) else {
            throw KeychainError(.invalidParameter, "A store name is a single path component, not \"\(name)\"")
        }
        return KeychainLocation(validatedPath: dataDirectory + "/" + name, tpm: tcti.map { .tcti($0) } ?? .automatic)
    }

    /// This location with another way of finding the TPM.
    public func with(tpm: TPMChoice) -> KeychainLocation {
        KeychainLocation(validatedPath: path, tpm: tpm)
    }

    /// The path and how the TPM is chosen.
    /// Same path and TPM choice; the logger is not compared.
    public static func == (lhs: KeychainLocation, rhs: KeychainLocation) -> Bool {
        lhs.path == rhs.path && lhs.tpm == rhs.tpm
    }

    /// Hashes what `==` compares.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(path)
        hasher.combine(tpm)
    }

    /// The path, and how the TPM is chosen when it is not ``TPMChoice/automatic``.
    public var description: String {
        switch tpm {
        case .automatic: "KeychainLocation(\(path))"
        case .automaticOrSimulated: "KeychainLocation(\(path), TPM automatic or simulated)"
        case .tcti(let tcti): "KeychainLocation(\(path), TPM \(tcti))"
        case .chosen(let tpm): "KeychainLocation(\(path), TPM \(tpm.summary))"
        }
    }

    /// The store every `Keychain` uses unless told otherwise: `~/.local/share/tpm-keychain/default`
    /// (or under `$XDG_DATA_HOME`), with the TPM chosen automatically.
    public static var `default`: KeychainLocation {
        KeychainLocation(validatedPath: dataDirectory + "/default", tpm: .automatic)
    }

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
        let path = path
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
        // $HOME first: the user database (NSS, /etc/passwd) is asked only without it.
        let home =
            environment["HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil }
            ?? FileManager.default.homeDirectoryForCurrentUser.path
        return home + "/.local/share/tpm-keychain"
    }()
}

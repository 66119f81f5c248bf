import Crypto
public import FoundationEssentials
public import KeychainService
public import KeychainVocabulary
import SystemCalls
import WireFormat

/// Moving secrets between stores and machines: an export archive of the items that may leave
/// this device, protected by a passphrase or by another machine's TPM, and its import into any
/// store.
///
/// What may leave is Apple's rule for encrypted backups and device migration: items of a
/// `…ThisDeviceOnly` class and items bound to access control (biometry, the device passcode,
/// user presence) never leave, and neither does a key that lives in the TPM. Everything else
/// leaves with its attributes, class, access group and dates. Items only the lock state
/// protects leave while the keychain is unlocked.
///
/// The archive (docs/FORMAT.md, "Export archives") is encrypted and authenticated as a whole:
/// an import checks every byte of it before it writes anything, and writes its items one by one
/// in the archive's order, each whole, so an interrupted import leaves a prefix of the archive.
///
/// - Important: a passphrase archive is as strong as its passphrase: anyone who has the file
///   can guess passphrases offline, slowed only by scrypt. An archive for a device import key
///   opens only in the TPM that holds that key. Neither protects items once imported into a
///   store that is weaker than this one.
public enum KeychainArchive {
    /// scrypt's cost parameters (RFC 7914): N = 2^`log2N`, r = `blockSize`, p = `parallelism`;
    /// the derivation needs 128·r·N bytes of memory.
    public struct PassphraseCost: Sendable, Hashable, CustomStringConvertible {
        /// The base-2 logarithm of scrypt's CPU and memory cost N.
        public let log2N: UInt8
        /// scrypt's block size r.
        public let blockSize: UInt16
        /// scrypt's parallelisation p.
        public let parallelism: UInt16

        /// N = 2^17, r = 8, p = 1: 128 MiB and about half a second on a laptop, what every
        /// export uses unless told otherwise.
        public static let standard = PassphraseCost(log2N: 17, blockSize: 8, parallelism: 1)

        /// A cost of N = 2^`log2N`, r = `blockSize`, p = `parallelism`.
        ///
        /// - Important: lower costs make guessing the passphrase cheaper; they are for tests.
        public init(log2N: UInt8, blockSize: UInt16, parallelism: UInt16) {
            self.log2N = log2N
            self.blockSize = blockSize
            self.parallelism = parallelism
        }

        /// What an import accepts: N from 2^10 to 2^20, r up to 32, p up to 16, at most 1 GiB,
        /// so a crafted header cannot make an import exhaust memory or time.
        var isReadable: Bool {
            (10...20).contains(log2N) && (1...32).contains(blockSize) && (1...16).contains(parallelism)
                && 128 * Int(blockSize) << Int(log2N) <= 1 << 30
        }

        /// The parameters as `scrypt N=2^17 r=8 p=1`.
        public var description: String { "scrypt N=2^\(log2N) r=\(blockSize) p=\(parallelism)" }
    }

    /// How an export is protected.
    public enum Protection: Sendable {
        /// Readable on any machine with the passphrase.
        case passphrase(String, cost: PassphraseCost = .standard)
        /// Readable only by the TPM that holds `key` (``deviceImportKey(for:)`` on the target).
        case deviceKey(DeviceImportKey)
    }

    /// What an import does with an item the store has already (the same primary key: class,
    /// access group, service or server, account, …).
    public struct ConflictPolicy: Sendable, Hashable, CustomStringConvertible {
        let name: String
        /// Keep the store's item; the archived one is skipped.
        public static let skip = ConflictPolicy(name: "skip")
        /// Write the archived value and attributes over the store's item. An item here bound to
        /// access control is never replaced by one that is not: it is skipped.
        public static let replace = ConflictPolicy(name: "replace")
        /// Keep both: a password is added under its account with " (imported)" appended (then
        /// " (imported 2)", …). A key or certificate with the same primary key is the same key
        /// or certificate, and is skipped.
        public static let keepBoth = ConflictPolicy(name: "keep-both")
        /// The policy as the CLI's `--conflicts` names it.
        public var description: String { name }
    }

    /// Why an item did not move.
    public struct SkipReason: Sendable, Hashable, CustomStringConvertible {
        /// The reason in words, as the CLI's report prints it.
        public let description: String
        /// Its accessibility class ends in ThisDeviceOnly: it never leaves the device.
        public static let thisDeviceOnly = SkipReason(description: "its class is ThisDeviceOnly")
        /// It is bound to access control, which this device's TPM enforces: it never leaves.
        public static let accessControl = SkipReason(
            description: "it is bound to access control (biometry, passcode or user presence)")
        /// A key made in the TPM, whose private part cannot leave it.
        public static let livesInTPM = SkipReason(description: "it is a key that lives in the TPM")
        /// Bound to the lock state while the keychain is locked: an export does not prompt.
        public static let deviceLocked = SkipReason(description: "the keychain is locked")
        /// An enrollment or passcode change invalidated it on this device.
        public static let invalidated = SkipReason(description: "it can no longer be opened on this device")
        /// An import's ``ConflictPolicy/skip``: the store has an item with its primary key.
        public static let alreadyPresent = SkipReason(description: "the store has it already")
        /// The import was told which access groups it may write, and the item's is not one.
        public static let otherAccessGroup = SkipReason(
            description: "its access group is not one this import was allowed to write")
        /// It would be a Secret Service collection's own settings (its label, access control and
        /// rules), which an import never writes: an archive must not lift a collection's rules.
        public static let collectionSettings = SkipReason(
            description: "it holds a Secret Service collection's own settings, which an import never writes")
        /// An import's ``ConflictPolicy/replace`` met an item here bound to access control.
        public static let protectedHere = SkipReason(
            description: "the store's item is bound to access control and is not replaced")
    }

    /// One item that did not move, and why.
    public struct SkippedItem: Sendable, CustomStringConvertible {
        /// The item's class and names (never its secret).
        public let item: String
        /// Why it stayed.
        public let reason: SkipReason
        /// The item and the reason, as the CLI's `--list-skipped` prints them.
        public var description: String { "\(item): \(reason)" }
    }

    /// What an export wrote and what it left out.
    public struct ExportReport: Sendable {
        /// Items written to the archive.
        public package(set) var exported = 0
        /// Items that stayed, each with its reason.
        public package(set) var skipped: [SkippedItem] = []
    }

    /// What an import did with one item (or would do, in a dry run).
    public struct Action: Sendable, Hashable, CustomStringConvertible {
        /// The action in words, as a dry run lists it.
        public let description: String
        /// A new item.
        public static let add = Action(description: "add")
        /// The store's item overwritten (``ConflictPolicy/replace``).
        public static let replace = Action(description: "replace")
        /// A second item beside the store's (``ConflictPolicy/keepBoth``).
        public static let keepBoth = Action(description: "add beside the existing item")
        /// Nothing written.
        public static let skip = Action(description: "skip")
    }

    /// One item of an archive and what an import does with it.
    public struct PlannedChange: Sendable, CustomStringConvertible {
        /// The item's class and names (never its secret).
        public let item: String
        /// What the import does with it.
        public let action: Action
        /// Why, for a skip.
        public let reason: SkipReason?
        /// The action, the item and any reason, as a dry run lists them.
        public var description: String { "\(action): \(item)" + (reason.map { " (\($0))" } ?? "") }
    }

    /// What an import did (or, in a dry run, would do).
    public struct ImportReport: Sendable {
        /// Items added.
        public package(set) var added = 0
        /// Items of the store overwritten.
        public package(set) var replaced = 0
        /// Items added beside an existing one.
        public package(set) var keptBoth = 0
        /// Items not written, each with its reason.
        public package(set) var skipped: [SkippedItem] = []
        /// Each item's change, in archive order: filled in a dry run only.
        public package(set) var planned: [PlannedChange] = []
        /// When the archive was made (a dry run and an import both read it).
        public package(set) var created: Date?

        package init() {}

        /// Counts what ``ItemImporter/write(_:)`` did with `item`.
        package mutating func record(_ item: TransferItem, _ outcome: (Action, SkipReason?)) {
            switch outcome.0 {
            case .add: added += 1
            case .replace: replaced += 1
            case .keepBoth: keptBoth += 1
            default: skipped.append(SkippedItem(item: item.summary, reason: outcome.1 ?? .alreadyPresent))
            }
        }
    }

    /// How an archive is protected, read from its header without a key.
    public enum Kind: Sendable, Hashable {
        /// For a passphrase (its scrypt cost is in the header too).
        case passphrase
        /// For the device import key with this fingerprint (``DeviceImportKey/fingerprint``).
        case deviceKey(fingerprint: String)
    }

    /// How the archive at `path` is protected: whether an import needs a passphrase.
    ///
    /// - Parameter path: the archive.
    /// - Throws: ``KeychainError`` `.decodingFailed` (not an archive), `.unsupportedVersion`,
    ///   `.tampered`, `.storageFailed`.
    public static func kind(ofArchiveAt path: String) throws(KeychainError) -> Kind {
        let file = try ArchiveImport.open(path)
        switch try ArchiveFormat.Header.read(from: file).protection {
        case .passphrase: return .passphrase
        case .deviceKey(let fingerprint, _): return .deviceKey(fingerprint: DeviceImportKey.fingerprint(fingerprint))
        }
    }

    /// Exports `location` to `path`, opening items the lock state protects through `proofs`:
    /// ``export(from:to:protection:context:progress:)`` (TPMKeychain) is the public entry.
    package static func export(
        from location: KeychainLocation, to path: String, protection: Protection, proofs: any ProofSource,
        progress: @Sendable (Int) -> Void
    ) async throws(KeychainError) -> ExportReport {
        try await ArchiveExport.run(
            ItemService(location: location, caller: caller), to: path, protection: protection, context: proofs,
            progress: progress)
    }

    /// Imports the archive at `path` into `location`:
    /// ``importArchive(at:into:passphrase:conflicts:accessGroups:dryRun:context:progress:)`` (TPMKeychain) is the public entry.
    package static func importArchive(
        at path: String, into location: KeychainLocation, passphrase: String?, conflicts: ConflictPolicy,
        accessGroups: Set<String>?, dryRun: Bool, proofs: any ProofSource, progress: @Sendable (Int, Int) -> Void
    ) async throws(KeychainError) -> ImportReport {
        try await ArchiveImport.run(
            path, into: ItemService(location: location, caller: caller), passphrase: passphrase, conflicts: conflicts,
            accessGroups: accessGroups, dryRun: dryRun, context: proofs, progress: progress)
    }

    /// Who exports and imports: the Keychain API acts for the store's owner.
    private static var caller: AccessCaller { AccessCaller(face: .keychain) }

    /// `location`'s device import key, made in its TPM on first use: the public key another
    /// machine exports to (``Protection/deviceKey(_:)``). Its private half never leaves the TPM.
    /// It dies with the TPM's owner hierarchy (a TPM clear) and with the store.
    ///
    /// - Parameter location: the store whose TPM holds the key.
    /// - Throws: ``KeychainError`` from opening the store and from the TPM.
    public static func deviceImportKey(
        for location: KeychainLocation = .default
    ) throws(KeychainError)
        -> DeviceImportKey
    {
        try DeviceImportKey.ofStore(ItemService(location: location, caller: caller), create: true)
    }
}

/// A device import key's public half, as `tpm-keychain device-key` prints it: "tkdk1:" and the
/// key's X9.63 form (P-256) in base64.
public struct DeviceImportKey: Sendable, Hashable, CustomStringConvertible {
    /// X9.63 (uncompressed P-256 point, 65 bytes).
    public let publicKey: [UInt8]

    static let prefix = "tkdk1:"

    /// The key from its text form, `tkdk1:` and base64, as `tpm-keychain device-key` prints it.
    ///
    /// - Throws: ``KeychainError`` `.invalidParameter` for text that is not a device import key.
    public init(_ text: String) throws(KeychainError) {
        let trimmed = text.trimmingWhitespace()
        guard trimmed.hasPrefix(Self.prefix),
            let bytes = Data(base64Encoded: String(trimmed.dropFirst(Self.prefix.count)))
        else {
            throw KeychainError(
                .invalidParameter,
                "Not a device import key: expected \"\(Self.prefix)…\" as tpm-keychain device-key prints it")
        }
        try self.init(publicKey: Array(bytes))
    }

    /// The key from its public point (X9.63, 65 bytes).
    ///
    /// - Throws: ``KeychainError`` `.invalidParameter` for bytes that are not a P-256 point.
    public init(publicKey: [UInt8]) throws(KeychainError) {
        guard publicKey.count == 65, (try? P256.KeyAgreement.PublicKey(x963Representation: publicKey)) != nil else {
            throw KeychainError(.invalidParameter, "A device import key is a P-256 public key (65 bytes, X9.63)")
        }
        self.publicKey = publicKey
    }

    /// The text form, for another machine's `export --to`.
    public var description: String { Self.prefix + Data(publicKey).base64EncodedString() }

    /// "SHA256:" and the base64 of the key's SHA-256, as OpenSSH prints fingerprints: compare it
    /// on both machines before trusting a key that travelled over a channel someone could change.
    public var fingerprint: String { Self.fingerprint(Array(SHA256.hash(data: publicKey))) }

    static func fingerprint(_ digest: [UInt8]) -> String {
        "SHA256:" + Data(digest).base64EncodedString().replacing("=", with: "")
    }
}

import Crypto
import FoundationEssentials
package import KeychainVocabulary
import SystemCalls
import TPM

#if canImport(Glibc)
import Glibc
#endif

// Whether a store is here, and what its metadata records, read without the TPM.
extension ItemStore {
    /// What stands at a store location, found without the TPM.
    package enum Presence: Sendable, Equatable {
        /// Nothing yet: no directory, or one holding only what may precede a store (an embedded
        /// simulator's state, lock files, an interrupted creation).
        case absent
        /// A store: its metadata file exists.
        case present
    }

    /// Names a directory may hold before a store is created in it.
    static let entriesBeforeCreation: Set<String> = [
        "swtpm", "simulator.lock", "store.lock", "device", StorageKeyContextFile.name,
        StoreMetadata.fileName + ".new", StoreMetadata.fileName + ".new" + Directory.temporarySuffix,
    ]

    /// Whether a store exists at `root`, without the TPM.
    ///
    /// - Throws: ``KeychainError`` `.tampered` for a damaged store (items but no metadata),
    ///   `.invalidParameter` for a relative path or a directory that holds something else,
    ///   `.permissionDenied`, `.unsafeFileSystem`.
    package static func presence(at root: String) throws(KeychainError) -> Presence {
        try validate(root)
        guard let directory = try Directory.open(root, in: nil, create: false, storeRoot: true) else { return .absent }
        return try presence(in: directory)
    }

    /// The TPM store.meta at `root` says the store was made on, read without the TPM (so not yet
    /// authenticated: opening the store checks it once the master key is unsealed), for choosing
    /// which TPM to ask. Nil when there is no store, a store from before version 6, or a file that
    /// cannot be read (opening reports why).
    package static func recordedTPMKind(at root: String) -> TPMKind? {
        recordedMetadata(at: root)?.tpm
    }

    /// What store.meta at `root` records, read without the TPM and so not yet authenticated (for
    /// reports such as `tpm-keychain doctor`); nil when it cannot be read.
    package static func recordedMetadata(
        at root: String
    ) -> (layout: UInt16, rollbackCounter: UInt32?, tpm: TPMKind?, boundUser: UInt32?)? {
        guard root.hasPrefix("/"),
            let directory = try? Directory.open(root, in: nil, create: false, storeRoot: true),
            let file = try? directory.openFile(StoreMetadata.fileName), file.size <= StoreMetadata.maximumFileSize,
            let bytes = try? file.read(count: file.size, at: 0),
            let parsed = try? StoreMetadata.parse(bytes, path: file.path)
        else { return nil }
        let facts = parsed.metadata.facts
        return (parsed.metadata.version, parsed.metadata.rollbackCounter, facts?.tpm, facts?.boundUser)
    }

    /// Opens the store at `root`; when there is none and `create` is set, creates it with a new
    /// master key sealed to the TPM. Nothing is written before the TPM has sealed that key, so a
    /// TPM that cannot be reached leaves no trace.
    ///
    /// A store whose master key was sealed by an older version with dictionary-attack protection
    /// (which a key without a PIN must not have) is resealed as noDA here, once.
    ///
    /// - Throws: ``KeychainError``: `.storeNotFound` (none, and `create` is false), `.wrongTPM`
    ///   when the store was sealed by another TPM, `.tpmUnavailable`, `.timedOut`, `.lockout`,
    ///   `.tampered` for damaged metadata or a store whose metadata is gone, `.invalidParameter`
    ///   for a relative path or a directory that is not a store, `.permissionDenied`,
    ///   `.unsafeFileSystem`, `.storageFailed`.
    ///
    /// - Parameter newStoreVersion: the format of a store created here; 2, except in tests that
    ///   need a format-1 store to upgrade.
    /// - Parameter lendTPM: the TPM for later work that needs one (following or making a key
    ///   rotation); by default `tpm`, which must then stay reachable while the store is open.
    /// - Parameter sharedGroup: when the store is created here, the Unix group (ID) whose members
    ///   share it: its directories 2770 and files 0660 in that group (this user must be a member,
    ///   and the parent directory must exist). An existing store keeps how it was created.
    /// - Parameter tpmKind: what `tpm` is, when the caller knows better than its TCTI tells (the
    ///   store's own simulator); recorded in a new store's metadata, and checked against what an
    ///   existing store recorded: a store made on a TPM device never opens on a simulator.
}

import Foundation
import KeychainStore

// Named stores: create, list and remove whole stores (SAP's KeychainStorage and the CLI's
// create-keychain, list-keychains and delete-keychain build on these).
extension KeychainLocation {
    /// Creates the store here now (a new master key sealed to the TPM) rather than on first use.
    ///
    /// - Throws: ``KeychainError`` `.duplicateItem` when a store exists here, and what opening a
    ///   store throws (`.tpmUnavailable`, `.invalidParameter` for a directory holding something else).
    public func createStore() throws(KeychainError) {
        guard !storeExists else { throw KeychainError(.duplicateItem, "A keychain store already exists at \(path)") }
        _ = try OpenStores.store(at: self)
    }

    /// Removes the store here: its keys are erased from this process's memory, then its directory
    /// is renamed away (one atomic step: no process ever opens half a store) and deleted. Other
    /// stores are untouched; users of this one elsewhere fail with `.storeNotFound` or `.storeClosed`.
    ///
    /// - Throws: ``KeychainError`` `.storeNotFound`, `.storageFailed`.
    public func removeStore() throws(KeychainError) {
        try checkStore()
        Keychain.closeStore(self)
        let doomed = (path as NSString).deletingLastPathComponent + "/." + (path as NSString).lastPathComponent + ".removed-" + UUID().uuidString
        do {
            try FileManager.default.moveItem(atPath: path, toPath: doomed)
            try FileManager.default.removeItem(atPath: doomed)
        } catch {
            throw KeychainError(.storageFailed, "Cannot remove the keychain store at \(path)", underlying: error)
        }
    }

    /// The names of the stores in `directory` (by default ``dataDirectory``, where
    /// ``named(_:tcti:)`` puts them), sorted; found without the TPM.
    public static func storeNames(in directory: String = dataDirectory) -> [String] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return entries.filter { name in
            !name.hasPrefix(".") && ((try? KeychainLocation(path: directory + "/" + name))?.storeExists ?? false)
        }.sorted()
    }
}

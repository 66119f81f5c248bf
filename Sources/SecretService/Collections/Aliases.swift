import FoundationEssentials

#if canImport(Glibc)
import Glibc
#endif

/// The Secret Service's aliases ("default" and any a client sets), kept in the data directory as
/// lines `alias<TAB>store name` in a 0600 file. Without an entry, an alias names the store of the
/// same name, so "default" is the Keychain API's and the CLI's default store.
///
/// Not authenticated: an alias only chooses which of the user's own stores a client writes to,
/// and anyone who can rewrite the file can write to the stores directly (docs/SECURITY.md).
struct Aliases {
    let file: String
    private var entries: [String: String] = [:]

    init(file: String) {
        self.file = file
        let text = (try? String(contentsOfFile: file, encoding: .utf8)) ?? ""
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: "\t", maxSplits: 1)
            if parts.count == 2 { entries[String(parts[0])] = String(parts[1]) }
        }
    }

    /// The ID of the collection `alias` names, if that collection exists.
    func collectionID(for alias: String, among collections: [String: SecretCollection]) -> String? {
        let id = ObjectPaths.element(for: entries[alias] ?? alias)
        return collections[id] != nil ? id : nil
    }

    /// The store `alias` names: its entry, else the store of its name; nil once SetAlias removed it.
    func storeName(for alias: String) -> String? {
        wasRemoved(alias) ? nil : entries[alias] ?? alias
    }

    /// Whether SetAlias removed `alias` (so it names nothing, not the store of its name).
    func wasRemoved(_ alias: String) -> Bool { entries[alias] == "" }

    mutating func set(_ alias: String, to collection: SecretCollection?) throws(SecretServiceError) {
        guard !alias.isEmpty, !alias.contains("\t"), !alias.contains("\n") else {
            throw SecretServiceError(.invalidArgs, "An alias is a non-empty name without tabs or line breaks")
        }
        entries[alias] = collection?.name
        if collection == nil, alias == "default" {
            // Removing "default" must not fall back to the store named "default".
            entries[alias] = ""
        }
        try save()
    }

    mutating func forget(_ collection: SecretCollection) {
        let before = entries.count
        entries = entries.filter { $0.value != collection.name }
        if entries.count != before { try? save() }
    }

    private func save() throws(SecretServiceError) {
        let text = entries.sorted { $0.key < $1.key }.map { "\($0.key)\t\($0.value)\n" }.joined()
        let temporary = file + ".new"
        guard
            FileManager.default.createFile(
                atPath: temporary, contents: Data(text.utf8), attributes: [.posixPermissions: 0o600])
        else { throw SecretServiceError(.failed, "The aliases could not be saved in \(file)") }
        guard rename(temporary, file) == 0 else {
            throw SecretServiceError(.failed, "The aliases could not be saved in \(file)")
        }
    }
}

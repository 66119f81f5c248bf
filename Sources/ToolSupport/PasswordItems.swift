package import KeychainStore
package import TPMKeychain

/// Password items of a store, of both classes, on the store engine: what the command-line tools
/// need and the `Keychain` API does not offer (internet passwords, matching on any attribute,
/// attributes such as kSecAttrDescription). `git-credential-tpm-keychain` keeps git's credentials
/// through it, and `tpm-keychain`'s `*-internet-password` verbs, `find-generic-password` and
/// `dump-keychain` read and write through it.
///
/// Attributes are stored as SecItem stores them, so SecItem code sees the same items: text as
/// UTF-8, `port` as a SecItem number (``InternetPasswordAttributes/port(_:)``), `ptcl` and `atyp`
/// as their four ASCII characters.
///
/// The engine's errors keep their message (a store sealed by another TPM, a damaged file) and
/// arrive as ``KeychainError`` with the engine's code.
package struct PasswordItems: Sendable {
    private let store: ItemStore

    /// Opens the store (one TPM unseal, shared with every other user of the location in this process).
    ///
    /// - Throws: ``KeychainError`` from opening the store.
    package init(location: KeychainLocation) throws(KeychainError) {
        store = try OpenStores.store(at: location)
    }

    /// The items of `itemClass` that have every attribute `matching` gives, with those values
    /// (the rest match anything), in creation order. Protected items are included
    /// (``ItemQueryResult/isProtected``); their secrets need a person.
    ///
    /// - Parameter synchronizable: Apple's rule for `sync` (``ItemQuery/Synchronizable``).
    /// - Throws: ``KeychainError`` `.tampered` for a damaged or misplaced file met on the way.
    package func query(_ itemClass: ItemClass, matching: AttributeList,
                       synchronizable: ItemQuery.Synchronizable = .any) throws(KeychainError) -> [ItemQueryResult] {
        let query = ItemQuery(itemClass: itemClass, matching: matching, synchronizable: synchronizable, limit: .all)
        return try engine { () throws(StoreError) in try store.query(query) }
    }

    /// Writes the item `primary` names (absent primary-key attributes count as empty); what else
    /// `primary` holds is set too, and attributes the item has and the write does not name are kept.
    ///
    /// - Throws: ``KeychainError`` `.duplicateItem` (mode `.add`), `.itemNotFound` (mode `.update`),
    ///   `.invalidParameter` (sizes), `.tampered`, `.timedOut`, `.storageFailed`.
    package func write(_ itemClass: ItemClass, primary: AttributeList, mode: ItemStore.WriteMode, value: ItemValue?,
                       changes: AttributeChanges = AttributeChanges()) throws(KeychainError) {
        try engine { () throws(StoreError) in
            try store.write(itemClass, primary: primary, mode: mode, value: value, changes: changes)
        }
    }

    /// Deletes the item of `itemClass` whose primary key `attributes` hold (a query result's
    /// attributes name their item).
    ///
    /// - Returns: false when it was gone already.
    /// - Throws: ``KeychainError`` `.timedOut`, `.storageFailed`.
    package func delete(_ itemClass: ItemClass, primary attributes: AttributeList) throws(KeychainError) -> Bool {
        try engine { () throws(StoreError) in try store.delete(itemClass, primary: attributes) }
    }

    /// An unprotected item's secret; nil when the item went away since it was found.
    ///
    /// - Throws: ``KeychainError`` `.interactionNotAllowed` for a protected item (its secret
    ///   needs a person), `.tampered`.
    package func secret(of item: ItemQueryResult) throws(KeychainError) -> [UInt8]? {
        try engine { () throws(StoreError) in try store.secret(of: item, recordKey: nil) }
    }

    /// Validates a name as the engine validates service and account names: 1 to
    /// ``ItemIdentity/maximumNameBytes`` bytes (0 allowed when `allowEmpty`), no NUL.
    ///
    /// - Throws: ``KeychainError`` `.invalidParameter`, naming `what`.
    package static func validate(_ name: String, _ what: String, allowEmpty: Bool = false) throws(KeychainError) {
        try engine { () throws(StoreError) in try ItemIdentity.validate(name, what, allowEmpty: allowEmpty) }
    }

    private static func engine<R>(_ body: () throws(StoreError) -> R) throws(KeychainError) -> R {
        do { return try body() } catch { throw KeychainError(.init(named: error.code.name), error.message, underlying: error.underlyingError) }
    }

    private func engine<R>(_ body: () throws(StoreError) -> R) throws(KeychainError) -> R {
        try Self.engine(body)
    }
}

/// How internet-password attributes are stored, as SecItem (and so Apple's keychain) stores them.
package enum InternetPasswordAttributes {
    /// A port as SecItem stores a number: eight bytes, big-endian; 0 for none (Apple's "no
    /// specific port").
    package static func port(_ port: UInt16?) -> [UInt8] {
        let value = UInt64(port ?? 0)
        return (0..<8).map { UInt8(truncatingIfNeeded: value >> (56 - 8 * $0)) }
    }

    /// The port an item's `port` attribute holds: a SecItem number (eight bytes) or a UINT32
    /// (four), big-endian; nil when absent or not a port.
    package static func port(in attributes: AttributeList) -> UInt16? {
        guard let bytes = attributes[AttributeTag.port], bytes.count == 8 || bytes.count == 4 else { return nil }
        let value = bytes.reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        return UInt16(exactly: value)
    }

    /// Apple's kSecAttrProtocol codes for the protocol names git (and URLs) use, those
    /// git-credential-osxkeychain maps.
    package static let protocolCodes: [String: String] = [
        "https": "htps", "http": "http", "ftp": "ftp ", "ftps": "ftps", "imap": "imap", "imaps": "imps", "smtp": "smtp",
    ]

    /// A four-character code (kSecAttrProtocol, kSecAttrAuthenticationType) as stored: its four
    /// bytes; nil unless `text` is exactly four printable ASCII characters.
    package static func fourCharacterCode(_ text: String) -> [UInt8]? {
        let bytes = Array(text.utf8)
        guard bytes.count == 4, bytes.allSatisfy({ (0x20...0x7E).contains($0) }) else { return nil }
        return bytes
    }
}

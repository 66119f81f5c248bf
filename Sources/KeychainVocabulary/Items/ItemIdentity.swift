/// Who an item belongs to: the triple that names it, validated before it reaches the disk.
package struct ItemIdentity: Sendable, Hashable {
    package static let maximumNameBytes = 1024
    /// The service of the generic password in which the Secret Service daemon keeps a
    /// collection's own settings (its label, access control and rules): not an item of the
    /// collection, and never written by an import.
    package static let secretServiceCollectionService = "org.freedesktop.secrets.collection"

    package let accessGroup: String
    package let service: String
    package let account: String

    /// - Throws: ``KeychainError`` `.invalidParameter` for an empty or oversized service or account,
    ///   an oversized access group, or a name containing NUL.
    package init(accessGroup: String, service: String, account: String) throws(KeychainError) {
        try Self.validate(service, "service", allowEmpty: false)
        try Self.validate(account, "account", allowEmpty: false)
        try Self.validate(accessGroup, "access group", allowEmpty: true)
        self.accessGroup = accessGroup
        self.service = service
        self.account = account
    }

    /// For names read back from an authenticated item, which were validated when written.
    package init(unchecked accessGroup: String, _ service: String, _ account: String) {
        self.accessGroup = accessGroup
        self.service = service
        self.account = account
    }

    package static func validate(_ name: String, _ what: String, allowEmpty: Bool = false) throws(KeychainError) {
        let size = name.utf8.count
        if size == 0 && !allowEmpty {
            throw KeychainError(.invalidParameter, "The \(what) name is empty")
        }
        guard size <= maximumNameBytes else {
            throw KeychainError(
                .invalidParameter, "The \(what) name is \(size) bytes; the limit is \(maximumNameBytes)")
        }
        guard !name.utf8.contains(0) else {
            throw KeychainError(.invalidParameter, "The \(what) name contains a NUL character")
        }
    }
}

extension AttributeList {
    /// The attributes that name a generic password: service, account, and the access group when
    /// there is one (absent, not empty, for none).
    package init(_ identity: ItemIdentity) {
        self.init()
        setString(identity.service, for: AttributeTag.service)
        setString(identity.account, for: AttributeTag.account)
        if !identity.accessGroup.isEmpty { setString(identity.accessGroup, for: AttributeTag.accessGroup) }
    }
}

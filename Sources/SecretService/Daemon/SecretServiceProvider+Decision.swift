import DBus

/// What a call does to a collection or its items, for the one decision of whether its caller may.
enum CollectionAccess: CaseIterable {
    /// Labels, attributes, item paths, searches, aliases read: what every program of the user sees
    /// (SECURITY.md, "The Secret Service"), so that clients can list and find what they may ask for.
    case readMetadata
    /// A secret leaves the daemon.
    case readSecret
    /// An item is created, or a secret, label or attributes change; the collection is renamed.
    case write
    /// An item or the whole collection is removed.
    case delete
    /// An alias is pointed at the collection, or away from it.
    case repoint
    case lock
    /// An unlock, which may prompt the person.
    case unlock
}

// The one decision point of the daemon: every method of every interface that touches a collection
// or its items asks `authorize` before it acts, and acts only when it returns. The collection's
// rules (AllowedExecutables) and lock state are checked here and nowhere else.
extension SecretServiceProvider {
    /// Decides whether `peer` may do `access` to `collection`.
    ///
    /// - Throws: ``SecretServiceError`` `.accessDenied` (audited) when the collection's rules do not
    ///   name the caller's executable; `.isLocked` when the collection is locked (for reads: locked
    ///   for this caller, which a confirm-each-access collection is until the person confirms).
    func authorize(
        _ access: CollectionAccess, _ collection: SecretCollection, for peer: BusPeer
    ) throws(SecretServiceError) {
        guard access != .readMetadata else { return }
        guard collection.allows(executable: peer.executable) else {
            audit?.record(
                peer: peer, action: "refused by the collection's rules", collection: collection.label, item: nil)
            throw SecretServiceError(
                .accessDenied,
                "The collection \"\(collection.label)\" may be used only by \(collection.allowedExecutables?.joined(separator: ", ") ?? ""), not by \(peer.executable ?? "an unknown executable")"
            )
        }
        switch access {
        case .readMetadata, .lock, .unlock:
            return
        case .readSecret:
            guard !isLocked(collection, for: peer.sender) else {
                throw SecretServiceError(
                    .isLocked,
                    collection.isLocked
                        ? "The collection \"\(collection.label)\" is locked: call Unlock, then read"
                        : "The collection \"\(collection.label)\" confirms each access: call Unlock, then read")
            }
        case .write, .delete, .repoint:
            guard !collection.isLocked else {
                throw SecretServiceError(
                    .isLocked, "The collection \"\(collection.label)\" is locked: call Unlock first")
            }
        }
    }
}

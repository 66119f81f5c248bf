import KeychainStore
import SystemCalls

/// Who may do what, decided in one function for every face: the caller's user, its access-group
/// entitlements, a Secret Service collection's rules and lock state. Item operations are decided
/// by ``ItemService``, which every face reaches items through and which asks
/// ``AccessDecision/decide(_:by:on:)`` before it acts; the Secret Service asks it for its
/// collections' rules and lock. No face checks a rule itself. (The protection of an item's
/// secret, which a key record and the TPM enforce, is the TPM's to decide.)
package enum AccessOperation: CaseIterable, Sendable {
    /// Names, labels, attributes, searches: what every program of the user may see of what it
    /// may use, so that it can find what to ask for.
    case readMetadata
    /// A secret leaves the store.
    case readSecret
    /// An item is created or changed, or a collection renamed.
    case write
    /// An item or a collection is removed.
    case delete
    /// An alias is pointed at a collection, or away from it.
    case repoint
    case lock
    /// An unlock, which may prompt the person.
    case unlock
}

/// The caller of an operation, as its face knows it.
package struct AccessCaller: Sendable, Hashable {
    package enum Face: String, Sendable, CaseIterable {
        case keychain, secItem, keychainStorage, cli, gitHelper, secretService, sshAgent
        /// The Secret portal's backend, whose one caller is xdg-desktop-portal.
        case secretPortal
        /// The passkey authenticator (CTAP 2.1), whose callers are browsers and FIDO clients.
        case authenticator

        /// Whether grants name this face's callers: the faces that serve other programs, which
        /// cannot open the store themselves. A face in the caller's own process (the library,
        /// SecItem, the tools) runs as the user with the store's keys in hand: no grant binds it.
        package var isNamedByGrants: Bool { self == .secretService || self == .sshAgent || self == .authenticator }
    }

    /// Where the caller's identity comes from.
    package enum Source: String, Sendable, Hashable {
        /// The caller is this process: its own uid and declared entitlements.
        case thisProcess
        /// A peer across a socket or bus: uid and pid from the kernel (SO_PEERCRED, as the bus
        /// reports it), the executable from /proc/PID/exe at its first call.
        case peerCredentials
    }

    package let face: Face
    /// The caller's user.
    package let uid: UInt32
    package let source: Source
    /// The access groups the caller is entitled to (SecItem's, from its entitlements); nil for a
    /// caller that acts for the store's owner in every group: the Keychain API, KeychainStorage,
    /// the tools and the Secret Service, which name a group in code rather than by entitlement.
    package let accessGroups: [String]?
    /// The caller's executable where the face learns it (the Secret Service, from the bus's
    /// credentials and /proc); nil when unknown.
    package let executable: String?
    /// What the kernel says of a peer (``CallerIdentity``), which grants name; read by the face
    /// only when the target has grants, since reading it costs a walk of /proc.
    package let facts: CallerFacts?

    package init(
        face: Face, uid: UInt32 = PrivateOwnership.effectiveUser, source: Source = .thisProcess,
        accessGroups: [String]? = nil, executable: String? = nil, facts: CallerFacts? = nil
    ) {
        self.face = face
        self.uid = uid
        self.source = source
        self.accessGroups = accessGroups
        self.executable = executable
        self.facts = facts
    }
}

/// What an operation touches.
package struct AccessTarget: Sendable, Equatable {
    /// Which programs a collection allows.
    package enum Rules: Sendable, Equatable {
        /// Every program of the user.
        case anyProgram
        /// Only these executables.
        case executables([String])
        /// The rules could not be read (the collection's store does not open): nobody.
        case unknown
    }

    /// The user whose keychain it is; nil when the face has already only its owner's keychain to
    /// offer (an in-process face, whose store refuses files of other owners).
    package var owner: UInt32?
    /// The item's access group ("" for none); nil when the operation names none.
    package var accessGroup: String?
    package var rules: Rules
    /// The collection (or store) is locked.
    package var locked: Bool
    /// Locked for this caller's reads: locked, or a confirm-each-access collection the person has
    /// not confirmed this caller for.
    package var lockedForReading: Bool
    /// The keychain's grants (``GrantBook``): those of the whole keychain and of its items.
    package var grants: [Grant]
    /// The persistent reference of the one item the operation is on; nil for the keychain (a
    /// search, a collection).
    package var item: [UInt8]?
    /// The time grants' leases are judged at (nanoseconds since 1970, UTC).
    package var now: Int64

    package init(
        owner: UInt32? = nil, accessGroup: String? = nil, rules: Rules = .anyProgram, locked: Bool = false,
        lockedForReading: Bool? = nil, grants: [Grant] = [], item: [UInt8]? = nil, now: Int64? = nil
    ) {
        self.owner = owner
        self.accessGroup = accessGroup
        self.rules = rules
        self.locked = locked
        self.lockedForReading = lockedForReading ?? locked
        self.grants = grants
        self.item = item
        self.now = now ?? GrantBook.now()
    }
}

/// Why an operation is refused; each face says it in its own protocol's words.
package enum AccessRefusal: Error, Equatable {
    /// The caller is another user than the keychain's owner.
    case notOwner(uid: UInt32, owner: UInt32)
    /// The caller is not entitled to the item's access group.
    case notEntitled(group: String)
    /// The collection's rules do not name the caller's executable (or could not be read).
    case notAllowed(executable: String?)
    /// Locked: for a read, locked for this caller.
    case locked(forReading: Bool)
    /// A grant denies this caller (its subject and, for an item's grant, the item named).
    case denied(by: Grant)
}

package enum AccessDecision {
    /// The groups of the decision point's own items, which no face may name or see: the grants
    /// (``GrantBook``), the audit trail's head (``AuditTrail``) and the application secrets' key.
    package static let reservedGroups: Set<String> = [
        GrantBook.accessGroup, AuditTrail.accessGroup, ItemStore.applicationSecretsAccessGroup,
        ItemStore.passkeysAccessGroup,
    ]

    /// Decides whether `caller` may do `operation` to `target`; returns when it may.
    ///
    /// - Parameter target: its `accessGroup` is the group the operation names (a SecItem query's
    ///   or new item's); an entitled caller must hold exactly that group.
    /// Grants are for a peer (another process, its facts read from the kernel), for everything
    /// but metadata: a deny that applies refuses, whatever else allows; an allow that applies
    /// stands in for the collection's rules and for a confirm-each-access collection's
    /// confirmation (the person's remembered answer), never for an unlock or for the item's own
    /// access control, which the TPM enforces after this decision.
    ///
    /// - Returns: the allow grant that decided, if one did: a grant of lease `.once` is then
    ///   the caller's to use up (``GrantBook/useUp(_:)``).
    /// - Throws: ``AccessRefusal``: `.notOwner` first, for every operation (another user sees
    ///   nothing of the keychain), then `.notEntitled` (an entitlement is checked even for
    ///   metadata: a SecItem caller does not see another group's items), then, for everything but
    ///   metadata, `.denied` by a grant, `.notAllowed` by the collection's rules (unless a grant
    ///   allows), then `.locked` for reads, writes, deletes and re-pointing of a locked target.
    ///   Lock and unlock need only the rules (or an allow grant).
    @discardableResult
    package static func decide(
        _ operation: AccessOperation, by caller: AccessCaller, on target: AccessTarget
    ) throws(AccessRefusal) -> Grant? {
        if let owner = target.owner, caller.uid != owner {
            throw .notOwner(uid: caller.uid, owner: owner)
        }
        if let group = target.accessGroup {
            // The grants' own group: read and written by the decision point's book only.
            if AccessDecision.reservedGroups.contains(group) { throw .notEntitled(group: group) }
            if let entitled = caller.accessGroups, !entitled.contains(group) { throw .notEntitled(group: group) }
        }
        guard operation != .readMetadata else { return nil }
        let granted = try grant(for: caller, on: target)
        if granted == nil {
            switch target.rules {
            case .anyProgram: break
            case .executables(let allowed):
                guard let executable = caller.executable, allowed.contains(executable) else {
                    throw .notAllowed(executable: caller.executable)
                }
            case .unknown: throw .notAllowed(executable: caller.executable)
            }
        }
        switch operation {
        case .readMetadata, .lock, .unlock: break
        case .readSecret:
            if granted == nil ? target.lockedForReading : target.locked { throw .locked(forReading: true) }
        case .write, .delete, .repoint: if target.locked { throw .locked(forReading: false) }
        }
        return granted
    }

    /// The allow grant that applies to `caller` on `target`, preferring one that lasts over one
    /// for a single use; nil when none does.
    ///
    /// - Throws: `.denied` when a deny grant applies: a deny always wins.
    private static func grant(for caller: AccessCaller, on target: AccessTarget) throws(AccessRefusal) -> Grant? {
        guard !target.grants.isEmpty, caller.source == .peerCredentials, caller.face.isNamedByGrants else { return nil }
        guard let facts = caller.facts else {
            // A peer whose facts could not be read (it ended meanwhile) is allowed by no grant,
            // and refused where a deny could have named it.
            if let deny = target.grants.first(where: {
                $0.effect == .deny && ($0.item == nil || $0.item == target.item)
            }) {
                throw .denied(by: deny)
            }
            return nil
        }
        let applying = target.grants.filter { $0.applies(to: facts, item: target.item, at: target.now) }
        if let deny = applying.first(where: { $0.effect == .deny }) { throw .denied(by: deny) }
        let allows = applying.filter { $0.effect == .allow }
        return allows.first { $0.lease != .once } ?? allows.first
    }

    /// Whether a query that names no group shows `caller` the items of access group `group` (""
    /// for items of none): every group for a caller without entitlements; else its entitled
    /// groups only, as ``decide(_:by:on:)`` would allow reading them. Nobody sees the grants'
    /// group (``GrantBook``).
    package static func sees(_ group: String, _ caller: AccessCaller) -> Bool {
        if reservedGroups.contains(group) { return false }
        guard let entitled = caller.accessGroups else { return true }
        return entitled.contains(group)
    }
}

import DBus
import SystemCalls
import TPMKeychain
import WireFormat

/// What a call does to a collection or its items: the operations of the one decision point.
typealias CollectionAccess = AccessOperation

// Every method and property of every object (ServiceObject, CollectionObject, ItemObject) that
// touches a collection or its items asks `authorize` before it acts, and acts only when it returns. `authorize` describes the caller and the collection
// (AllowedExecutables, lock state) and leaves the decision to `AccessDecision`, which SecItem's
// entitlements go through too; it only puts the refusal in the specification's words.
extension SecretServiceRegistry {
    /// Decides whether `peer` may do `access` to `collection`.
    ///
    /// - Throws: ``SecretServiceError`` `.accessDenied` (audited) when the collection's rules do not
    ///   name the caller's executable; `.isLocked` when the collection is locked (for reads: locked
    ///   for this caller, which a confirm-each-access collection is until the person confirms).
    ///
    /// - Parameter item: the item the call is on, which the collection's item grants name.
    func authorize(
        _ access: CollectionAccess, _ collection: SecretCollection, for peer: BusPeer, item: SecretItem? = nil
    ) throws(SecretServiceError) {
        // The collection's grants and trail, read once per call (nothing for metadata).
        let policy = access == .readMetadata ? nil : try collection.policy()
        let grants = policy?.grants ?? []
        let audited = policy?.keepsAuditTrail ?? false
        // The kernel's facts of the caller, read (a walk of /proc) only when a grant may name it
        // or the trail records it.
        let caller = peer.caller(facts: grants.isEmpty && !audited ? nil : peer.identity?.facts)
        let what =
            "collection=" + DisplayText.quoted(collection.label, limit: 200)
            + (item.map { " item=" + DisplayText.quoted($0.label, limit: 200) } ?? "")
        let rules: AccessTarget.Rules =
            collection.isOpen ? collection.allowedExecutables.map { .executables($0) } ?? .anyProgram : .unknown
        let target = AccessTarget(
            owner: ownUID, rules: rules, locked: collection.isLocked,
            lockedForReading: awaitsConfirmation(collection, from: peer.sender, item: item), grants: grants,
            item: item?.reference)
        let used: Grant?
        do throws(AccessRefusal) {
            used = try AccessDecision.decide(access, by: caller, on: target)
        } catch {
            if audited {
                try collection.audit(
                    AuditTrail.line(
                        access, by: caller, on: what, outcome: AuditTrail.outcome(granted: nil, refusal: error)))
            }
            switch error {
            case .denied(let grant):
                audit?.record(
                    peer: peer, action: "refused by grant \(grant.id)", collection: collection.label, item: item?.label)
                throw SecretServiceError(
                    .accessDenied,
                    "A grant of the collection \"\(collection.label)\" denies \(grant.subject.description): tpm-keychain grants revoke \(grant.id) lifts it"
                )
            case .notAllowed:
                audit?.record(
                    peer: peer, action: "refused by the collection's rules", collection: collection.label, item: nil)
                throw SecretServiceError(
                    .accessDenied,
                    "The collection \"\(collection.label)\" may be used only by \(collection.allowedExecutables?.joined(separator: ", ") ?? ""), not by \(peer.executable ?? "an unknown executable")"
                )
            case .locked(forReading: true):
                throw SecretServiceError(
                    .isLocked,
                    collection.isLocked
                        ? "The collection \"\(collection.label)\" is locked: call Unlock, then read"
                        : "The collection \"\(collection.label)\" confirms each access: call Unlock, then read")
            case .locked(forReading: false):
                throw SecretServiceError(
                    .isLocked, "The collection \"\(collection.label)\" is locked: call Unlock first")
            case .notOwner(let uid, let owner):
                throw SecretServiceError(
                    .accessDenied, "This Secret Service belongs to uid \(owner); calls from uid \(uid) are refused")
            case .notEntitled(let group):
                // The daemon names no access group, so this cannot happen; refused all the same.
                throw SecretServiceError(.accessDenied, "The access group \(group) is not this caller's")
            }
        }
        if audited {
            try collection.audit(
                AuditTrail.line(access, by: caller, on: what, outcome: AuditTrail.outcome(granted: used, refusal: nil)))
        }
        if let used {
            audit?.record(
                peer: peer, action: "allowed by grant \(used.id)", collection: collection.label, item: item?.label)
            try collection.useUp(used)
        }
    }
}

extension SecretServiceRegistry {
    /// Whether a grant lets `peer` read the secrets of `collection` without a confirmation: the
    /// decision for a read the person has not confirmed (nothing is used up by asking).
    func isGranted(_ collection: SecretCollection, to peer: BusPeer) -> Bool {
        guard let grants = try? collection.grants(), !grants.isEmpty else { return false }
        let rules: AccessTarget.Rules =
            collection.isOpen ? collection.allowedExecutables.map { .executables($0) } ?? .anyProgram : .unknown
        let target = AccessTarget(
            owner: ownUID, rules: rules, locked: collection.isLocked, lockedForReading: true, grants: grants)
        let granted = try? AccessDecision.decide(
            .readSecret, by: peer.caller(facts: peer.identity?.facts), on: target)
        return granted != nil
    }
}

extension BusPeer {
    /// The peer as the decision point's caller: its uid and pid from the bus's credentials (the
    /// kernel's SO_PEERCRED), its executable from /proc at its first call.
    var caller: AccessCaller { caller(facts: nil) }

    /// The peer as the decision point's caller, with what the kernel says of it where a grant
    /// may name it.
    func caller(facts: CallerFacts?) -> AccessCaller {
        AccessCaller(face: .secretService, uid: uid, source: .peerCredentials, executable: executable, facts: facts)
    }

    /// What the kernel says of the peer (CallerIdentity), read now: the bus gives a pid, not a
    /// pidfd (dbus 1.14), so the process is held from here, while the caller waits for its answer.
    var identity: CallerIdentity? {
        PinnedProcess(pid: pid).flatMap { CallerIdentity.of($0, uid: uid) }
    }
}

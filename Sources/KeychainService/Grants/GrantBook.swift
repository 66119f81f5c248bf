import FoundationEssentials
import KeychainStore
package import KeychainVocabulary
import SystemCalls
import WireFormat

#if canImport(Glibc)
import Glibc
#endif

/// Where a keychain keeps its grants: each an item of the store (a generic password in the
/// reserved access group `tpm-keychain.grants`, service `grants`, account its ID), so that a
/// grant is encrypted, authenticated and rollback-checked as every item is, and moves with the
/// store. No face sees or writes that group (``ItemService/visible(_:)``); grants are read and
/// written here only, for the decision point and `tpm-keychain grants`. docs/FORMAT.md, "Grants".
package enum GrantBook {
    /// The access group no face may name: grants live there.
    package static let accessGroup = "tpm-keychain.grants"
    static let service = "grants"

    // The grant's fields, as attributes of its item.
    static let effectTag = FourCharacterCode("tkge")
    static let executableTag = FourCharacterCode("tkgx")
    static let executableHashTag = FourCharacterCode("tkgh")
    static let unitTag = FourCharacterCode("tkgu")
    static let applicationTag = FourCharacterCode("tkga")
    static let ancestorTag = FourCharacterCode("tkgp")
    static let itemTag = FourCharacterCode("tkgi")
    static let itemLabelTag = FourCharacterCode("tkgn")
    static let leaseTag = FourCharacterCode("tkgl")
    static let untilTag = FourCharacterCode("tkgt")
    static let sessionTag = FourCharacterCode("tkgs")
    static let purposeTag = FourCharacterCode("tkgw")

    /// Now, in nanoseconds since 1970 (UTC): the clock leases are judged by.
    package static func now() -> Int64 {
        var time = timespec()
        clock_gettime(CLOCK_REALTIME, &time)
        return Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec) + testClockOffset()
    }

    /// Seconds that tests move the leases' clock on by, in debug builds only: the decimal number
    /// in the file `TPM_KEYCHAIN_TEST_CLOCK_OFFSET_FILE` names, so that a test ends a lease
    /// without waiting for it (GrantTests). A release build has no such clock: nothing but the
    /// system's time judges a lease.
    private static func testClockOffset() -> Int64 {
        #if DEBUG
        guard let file = getenv("TPM_KEYCHAIN_TEST_CLOCK_OFFSET_FILE"),
            let text = try? String(contentsOfFile: String(cString: file), encoding: .utf8),
            let seconds = text.split(whereSeparator: \.isWhitespace).first.flatMap({ Int64($0) }),
            abs(seconds) < 1 << 32
        else { return 0 }
        return seconds * 1_000_000_000
        #else
        return 0
        #endif
    }

    /// A new grant's ID: 16 random bytes as hex.
    package static func newID() -> String {
        (0..<16).map { _ in UInt8.random(in: 0...255) }.hexString
    }

    /// The login session of process `pid` (``CallerFacts/loginSession``): this boot's ID and the
    /// kernel's audit session ID, "-" where the kernel keeps none for it.
    package static func loginSession(ofProcess pid: Int32) -> String? {
        guard let boot = firstLine(of: "/proc/sys/kernel/random/boot_id") else { return nil }
        let session = firstLine(of: "/proc/\(pid)/sessionid").flatMap(UInt32.init) ?? UInt32.max
        return boot + "/" + (session == UInt32.max ? "-" : String(session))
    }

    private static func firstLine(of path: String) -> String? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var buffer = [UInt8](repeating: 0, count: 128)
        let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
        guard count > 0 else { return nil }
        return String(decoding: buffer.prefix(count).prefix { $0 != 0x0A }, as: UTF8.self)
    }

    /// The primary key of the grant `id`'s item.
    static func primary(id: String) -> AttributeList {
        AttributeList(ItemIdentity(unchecked: accessGroup, service, id))
    }

    /// The item's attributes for `grant`: its primary key and its fields.
    static func attributes(of grant: Grant) -> AttributeList {
        var attributes = primary(id: grant.id)
        attributes.setString(grant.effect.rawValue, for: effectTag)
        attributes.setString(grant.subject.executable, for: executableTag)
        attributes[executableHashTag] = grant.subject.executableHash
        attributes.setString(grant.subject.unit, for: unitTag)
        attributes.setString(grant.subject.applicationID, for: applicationTag)
        attributes.setString(grant.subject.ancestor, for: ancestorTag)
        attributes[itemTag] = grant.item
        attributes.setString(grant.itemLabel, for: itemLabelTag)
        attributes.setString(grant.purpose, for: purposeTag)
        switch grant.lease {
        case .always: attributes.setString("always", for: leaseTag)
        case .once: attributes.setString("once", for: leaseTag)
        case .until(let end):
            attributes.setString("until", for: leaseTag)
            attributes.setNanoseconds(end, for: untilTag)
        case .loginSession(let session):
            attributes.setString("session", for: leaseTag)
            attributes.setString(session, for: sessionTag)
        }
        attributes.setNanoseconds(grant.created, for: AttributeTag.creationDate)
        return attributes
    }

    /// The grant an item of the group holds; nil for one that is not a whole grant (which
    /// therefore allows nothing; a deny that cannot be read is reported by ``grants(of:)``).
    static func grant(from attributes: AttributeList) -> Grant? {
        guard let id = attributes.string(AttributeTag.account),
            let effect = attributes.string(effectTag).flatMap(Grant.Effect.init(rawValue:))
        else { return nil }
        let lease: Grant.Lease
        switch attributes.string(leaseTag) {
        case "always": lease = .always
        case "once": lease = .once
        case "until":
            guard let end = attributes.nanoseconds(untilTag) else { return nil }
            lease = .until(end)
        case "session":
            guard let session = attributes.string(sessionTag) else { return nil }
            lease = .loginSession(session)
        default: return nil
        }
        let subject = Grant.Subject(
            executable: attributes.string(executableTag), executableHash: attributes[executableHashTag],
            unit: attributes.string(unitTag), applicationID: attributes.string(applicationTag),
            ancestor: attributes.string(ancestorTag))
        guard !subject.isEmpty else { return nil }
        return Grant(
            id: id, effect: effect, subject: subject, item: attributes[itemTag],
            itemLabel: attributes.string(itemLabelTag), lease: lease, purpose: attributes.string(purposeTag),
            created: attributes.nanoseconds(AttributeTag.creationDate) ?? 0)
    }

    /// What each store's policy was when last read, with the store's change stamp then.
    private static let cache = Locked<[String: (stamp: [Int64], policy: StorePolicy)]>([:])

    /// The policy of `store` (at `path`), read again only after the store changed: one change
    /// stamp (a few stat calls) per decision.
    ///
    /// - Throws: as ``grants(of:at:)``.
    static func policy(of store: ItemStore, at path: String) throws(KeychainError) -> StorePolicy {
        let stamp = store.changeStamp()
        if !stamp.isEmpty, let cached = cache.withLock({ $0[path] }), cached.stamp == stamp {
            return cached.policy
        }
        let policy = StorePolicy(
            grants: try grants(of: store, at: path), keepsAuditTrail: (try? store.auditIsEnabled()) ?? false)
        cache.withLock { cache in
            if cache.count >= 64 { cache.removeAll() }
            cache[path] = (stamp, policy)
        }
        return policy
    }

    /// The grants of `store` (at `path`), read from its items.
    ///
    /// - Throws: ``KeychainError`` from reading the items, and `.tampered` for an item of the
    ///   group that is not a grant: a grant that cannot be read might be a deny.
    private static func grants(of store: ItemStore, at path: String) throws(KeychainError) -> [Grant] {
        var matching = AttributeList()
        matching.setString(accessGroup, for: AttributeTag.accessGroup)
        matching.setString(service, for: AttributeTag.service)
        var grants: [Grant] = []
        for result in try store.query(
            ItemQuery(itemClass: .genericPassword, matching: matching, synchronizable: .any, limit: .all))
        {
            guard let grant = grant(from: result.attributes) else {
                throw KeychainError(
                    .tampered,
                    "A grant of the keychain at \(path) cannot be read: revoke it (tpm-keychain grants revoke) or restore the store"
                )
            }
            grants.append(grant)
        }
        return grants
    }
}

/// What the decision point reads of a keychain for an operation by a served peer: its grants,
/// and whether it keeps an audit trail.
package struct StorePolicy: Sendable {
    package let grants: [Grant]
    package let keepsAuditTrail: Bool
}

extension ItemService {
    /// The keychain's policy for the decision point: its grants and whether it keeps a trail.
    ///
    /// - Throws: ``KeychainError`` as ``GrantBook/policy(of:at:)``, and from opening the store.
    package func policy() throws(KeychainError) -> StorePolicy {
        try GrantBook.policy(of: try store, at: location.path)
    }

    /// The keychain's grants, for people (`tpm-keychain grants list`).
    package func grants() throws(KeychainError) -> [Grant] {
        try policy().grants
    }

    /// Records `grant` (a new ID: an existing grant is never changed, only revoked).
    ///
    /// - Throws: ``KeychainError`` `.duplicateItem` for an ID in use, `.invalidParameter` for a
    ///   grant that names nobody, and the store's write errors.
    package func addGrant(_ grant: Grant) throws(KeychainError) {
        guard !grant.subject.isEmpty else {
            throw KeychainError(
                .invalidParameter,
                "A grant names whom it is for: an executable, its hash, a unit, an app ID or an ancestor")
        }
        try store.write(
            .genericPassword, primary: GrantBook.attributes(of: grant), mode: .add,
            value: ItemValue(kind: .data, bytes: [UInt8(ascii: "g")]), changes: AttributeChanges())
    }

    /// Removes the grant `id`; false when there is none.
    package func revokeGrant(id: String) throws(KeychainError) -> Bool {
        try store.delete(.genericPassword, primary: GrantBook.primary(id: id))
    }

    /// Uses up `grant` when its lease is for one use (after the operation it allowed), and
    /// removes grants whose time is past. Errors are the caller's to report: the operation has
    /// happened.
    package func useUp(_ grant: Grant) throws(KeychainError) {
        guard grant.lease == .once else { return }
        _ = try revokeGrant(id: grant.id)
    }
}

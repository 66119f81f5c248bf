import KeychainVocabulary
import WireFormat

/// What a grant can name of a caller: what the kernel says of it (``CallerIdentity``), never the
/// caller's own word. A field the kernel did not give is nil, and matches no grant that names it.
package struct CallerFacts: Sendable, Hashable {
    /// /proc/PID/exe.
    package let executable: String?
    /// SHA-256 of the file the process runs, read through /proc/PID/exe.
    package let executableHash: [UInt8]?
    package let unit: String?
    package let applicationID: String?
    /// The ancestors' executables, parent first.
    package let ancestors: [String]
    /// The caller's login session: the boot's ID and the kernel's audit session ID
    /// (/proc/PID/sessionid), "-" where the kernel has none for it (a container).
    package let loginSession: String?
    /// The process, for the audit trail (no grant names a pid: pids are reused).
    package let pid: Int32?

    package init(
        executable: String?, executableHash: [UInt8]?, unit: String? = nil, applicationID: String? = nil,
        ancestors: [String] = [], loginSession: String? = nil, pid: Int32? = nil
    ) {
        self.pid = pid
        self.executable = executable
        self.executableHash = executableHash
        self.unit = unit
        self.applicationID = applicationID
        self.ancestors = ancestors
        self.loginSession = loginSession
    }
}

/// A standing answer to "may this program use this keychain, or this item of it?": allow or
/// deny, for the callers it names, over the whole keychain or one item, for as long as its lease
/// says. Decided by ``AccessDecision``, for every face whose caller is another process; kept as
/// an item of the store (``GrantBook``), sealed and authenticated as every item is.
package struct Grant: Sendable, Equatable {
    package enum Effect: String, Sendable, CaseIterable {
        case allow, deny
    }

    /// How long a grant holds.
    package enum Lease: Sendable, Equatable {
        /// Until revoked.
        case always
        /// Until this time (nanoseconds since 1970, UTC), then it is as if revoked.
        case until(Int64)
        /// For the login session it was made in (``CallerFacts/loginSession``): a caller of
        /// another session, or of the same after a reboot, is not covered.
        case loginSession(String)
        /// For one use: the first operation it allows uses it up.
        case once
    }

    /// Who a grant is for: every field given must match the caller; at least one is given.
    package struct Subject: Sendable, Equatable {
        package var executable: String?
        package var executableHash: [UInt8]?
        package var unit: String?
        package var applicationID: String?
        /// An executable anywhere among the caller's ancestors.
        package var ancestor: String?

        package init(
            executable: String? = nil, executableHash: [UInt8]? = nil, unit: String? = nil,
            applicationID: String? = nil, ancestor: String? = nil
        ) {
            self.executable = executable
            self.executableHash = executableHash
            self.unit = unit
            self.applicationID = applicationID
            self.ancestor = ancestor
        }

        package var isEmpty: Bool {
            executable == nil && executableHash == nil && unit == nil && applicationID == nil && ancestor == nil
        }

        /// Whether the caller `facts` describe is this subject: each field given equals the
        /// kernel's fact (the ancestor: one of them); unknown facts match nothing.
        package func matches(_ facts: CallerFacts) -> Bool {
            guard !isEmpty else { return false }
            if let executable, facts.executable != executable { return false }
            if let executableHash, facts.executableHash != executableHash { return false }
            if let unit, facts.unit != unit { return false }
            if let applicationID, facts.applicationID != applicationID { return false }
            if let ancestor, !facts.ancestors.contains(ancestor) { return false }
            return true
        }

        /// For people: `executable /usr/bin/secret-tool, sha256 3f2a…` and so on.
        package var description: String {
            var parts: [String] = []
            if let executable { parts.append("executable " + DisplayText.quoted(executable, limit: 200)) }
            if let executableHash { parts.append("sha256 " + executableHash.hexString) }
            if let unit { parts.append("unit " + DisplayText.quoted(unit, limit: 100)) }
            if let applicationID { parts.append("app " + DisplayText.quoted(applicationID, limit: 100)) }
            if let ancestor { parts.append("started under " + DisplayText.quoted(ancestor, limit: 200)) }
            return parts.joined(separator: ", ")
        }
    }

    /// Its name among the store's grants: 16 random bytes, as 32 hex digits.
    package let id: String
    package let effect: Effect
    package let subject: Subject
    /// The persistent reference of the one item it covers; nil for the whole keychain.
    package let item: [UInt8]?
    /// The covered item's label when the grant was made, for people.
    package let itemLabel: String?
    package let lease: Lease
    /// Why it was asked for, as the client or the person put it; shown, never decided on.
    package let purpose: String?
    /// When it was made (nanoseconds since 1970, UTC).
    package let created: Int64

    package init(
        id: String, effect: Effect, subject: Subject, item: [UInt8]? = nil, itemLabel: String? = nil,
        lease: Lease = .always, purpose: String? = nil, created: Int64
    ) {
        self.id = id
        self.effect = effect
        self.subject = subject
        self.item = item
        self.itemLabel = itemLabel
        self.lease = lease
        self.purpose = purpose
        self.created = created
    }

    /// Whether the grant speaks of an operation by the caller `facts` describe on `item` (nil:
    /// the keychain as a whole) at `now`: its subject is the caller, its lease holds, and it is
    /// for the whole keychain or for that item.
    package func applies(to facts: CallerFacts, item target: [UInt8]?, at now: Int64) -> Bool {
        if let item, item != target { return false }
        switch lease {
        case .always, .once: break
        case .until(let end): if now >= end { return false }
        case .loginSession(let session): if facts.loginSession != session { return false }
        }
        return subject.matches(facts)
    }

    /// Whether its lease has run out at `now` (a login-session lease is never known to have).
    package func hasExpired(at now: Int64) -> Bool {
        if case .until(let end) = lease { return now >= end }
        return false
    }
}

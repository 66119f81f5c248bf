package import KeychainStore
package import KeychainVocabulary
import SystemCalls
import WireFormat

/// A keychain's tamper-evident record of what the programs it serves did: every decision of the
/// decision point for a peer of the Secret Service or the ssh agent (reads of secrets, writes,
/// deletes, locks, unlocks, re-pointed aliases, and every refusal), with who asked as the kernel
/// says (uid, pid, executable and its file's hash, the chain that started it, unit, app ID) and
/// what was touched, never a secret. Off until `tpm-keychain audit enable`; kept by the store
/// (``ItemStore/appendAudit(_:)``): a MAC chain whose head is a rollback-protected item.
package enum AuditTrail {
    /// The access group of the trail's head item.
    package static let accessGroup = ItemStore.auditAccessGroup

    /// One line for a decision: `<face> <operation> allowed|refused (<why>) by <caller> on <what>`.
    package static func line(
        _ operation: AccessOperation, by caller: AccessCaller, on target: String, outcome: String
    ) -> String {
        var who = "uid=\(caller.uid)"
        if let pid = caller.facts?.pid { who += " pid=\(pid)" }
        who += " exe=" + DisplayText.quoted(caller.facts?.executable ?? caller.executable ?? "?", limit: 300)
        if let hash = caller.facts?.executableHash { who += " sha256=" + hash.hexString }
        if let ancestors = caller.facts?.ancestors, !ancestors.isEmpty {
            let chain = (ancestors.reversed() + [caller.facts?.executable ?? "?"]).map { path in
                String(path.split(separator: "/").last ?? Substring(path))
            }
            who += " chain=" + DisplayText.quoted(chain.joined(separator: " → "), limit: 400)
        }
        if let unit = caller.facts?.unit { who += " unit=" + DisplayText.quoted(unit, limit: 100) }
        if let app = caller.facts?.applicationID { who += " app=" + DisplayText.quoted(app, limit: 100) }
        return "\(caller.face.rawValue) \(name(of: operation)) \(outcome) \(who) \(target)"
    }

    static func name(of operation: AccessOperation) -> String {
        switch operation {
        case .readMetadata: "read-metadata"
        case .readSecret: "read-secret"
        case .write: "write"
        case .delete: "delete"
        case .repoint: "repoint"
        case .lock: "lock"
        case .unlock: "unlock"
        }
    }

    /// The outcome's words: `allowed`, `allowed by grant ID`, `refused (why)`.
    package static func outcome(granted: Grant?, refusal: AccessRefusal?) -> String {
        if let refusal {
            let why: String
            switch refusal {
            case .notOwner(let uid, _): why = "another user, uid \(uid)"
            case .notEntitled(let group): why = "not entitled to " + DisplayText.quoted(group, limit: 100)
            case .notAllowed: why = "not among the allowed programs"
            case .locked: why = "locked"
            case .denied(let grant): why = "denied by grant \(grant.id)"
            }
            return "refused (\(why))"
        }
        return granted.map { "allowed by grant \($0.id)" } ?? "allowed"
    }
}

extension ItemService {
    /// Whether this keychain keeps an audit trail (``policy()``); false when its store or its
    /// grants cannot be read.
    package func keepsAuditTrail() -> Bool {
        (try? policy())?.keepsAuditTrail ?? false
    }

    package func enableAuditTrail() throws(KeychainError) {
        try store.enableAudit()
    }

    package func disableAuditTrail() throws(KeychainError) {
        try store.appendAudit("audit trail stopped")
        try store.disableAudit()
    }

    /// The trail, checked.
    package func readAuditTrail() throws(KeychainError) -> ItemStore.AuditReading {
        try store.readAudit()
    }

    /// Appends a decision for a peer to the trail, for a keychain whose ``policy()`` said it
    /// keeps one (the store appends nothing when the trail was stopped meanwhile).
    ///
    /// - Throws: ``KeychainError`` when the trail cannot be written: the operation is then
    ///   refused (a kept trail is never silently skipped).
    package func audit(_ line: String) throws(KeychainError) {
        try store.appendAudit(line)
    }
}

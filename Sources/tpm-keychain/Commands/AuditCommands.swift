import ArgumentParser
import CommandLineSupport
import FoundationEssentials
import TPMKeychain
import ToolSupport

/// `tpm-keychain audit`: the keychain's tamper-evident record of what the programs it serves did
/// (docs/SECURITY.md, "The audit trail").
struct AuditCommands: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "audit",
        abstract: "The keychain's tamper-evident audit trail: show, enable, disable.",
        discussion: """
            Once enabled, every decision for a program the Secret Service or the ssh agent serves \
            (a secret read, a write, a delete, a lock or unlock, and every refusal) is recorded \
            with who asked, as the kernel says (uid, pid, executable and its SHA-256, the chain of \
            processes that started it, unit, app ID) and what it touched; never a secret. Each \
            record is chained to the one before by a MAC under the store's key, and the last one \
            is kept in the store, which the TPM's counter protects from being put back: show \
            reports an edited, inserted, removed or cut record.
            """,
        subcommands: [ShowAudit.self, EnableAudit.self, DisableAudit.self], defaultSubcommand: ShowAudit.self)
}

struct ShowAudit: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "show", abstract: "Check the trail and print its records, oldest first.")

    @OptionGroup var store: KeychainOptions

    func run() throws {
        try reportingErrors {
            try StoreSession.withExisting(store.path) { try perform(in: $0) }
        }
    }

    func perform(in session: StoreSession, output: OutputLine = { print($0) }) throws {
        let items = try ItemService(location: session.location, caller: AccessCaller(face: .cli))
        let reading = try items.readAuditTrail()
        for record in reading.records {
            let time = Date(timeIntervalSince1970: Double(record.time) / 1e9).formatted(.iso8601)
            output("\(record.sequence)  \(time)  \(record.text)")
        }
        if let problem = reading.problem {
            throw KeychainError(
                .tampered,
                "The audit trail cannot be trusted after record \(reading.records.count): \(problem)")
        }
        output("intact: \(reading.records.count) records")
    }
}

struct EnableAudit: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "enable", abstract: "Start keeping the trail.")

    @OptionGroup var store: KeychainOptions

    func run() throws {
        try reportingErrors {
            try StoreSession.withExisting(store.path) { try perform(in: $0) }
        }
    }

    func perform(in session: StoreSession, output: OutputLine = { print($0) }) throws {
        try ItemService(location: session.location, caller: AccessCaller(face: .cli)).enableAuditTrail()
        output("the audit trail is kept.")
    }
}

struct DisableAudit: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "disable", abstract: "Stop keeping the trail (its last record says so; the log stays).")

    @OptionGroup var store: KeychainOptions

    func run() throws {
        try reportingErrors {
            try StoreSession.withExisting(store.path) { try perform(in: $0) }
        }
    }

    func perform(in session: StoreSession, output: OutputLine = { print($0) }) throws {
        try ItemService(location: session.location, caller: AccessCaller(face: .cli)).disableAuditTrail()
        output("the audit trail is no longer kept.")
    }
}

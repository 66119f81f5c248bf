import ArgumentParser
import CommandLineSupport
import FoundationEssentials
import KeychainVocabulary
import TPMKeychain
import ToolSupport
import WireFormat

#if canImport(Glibc)
import Glibc
#endif

/// `tpm-keychain grants`: which programs may use a keychain (a Secret Service collection, the
/// ssh agent's keys) or one item of it, decided by the decision point for every face that
/// serves other programs (docs/SECURITY.md, "Grants").
struct GrantCommands: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "grants",
        abstract: "Allow or deny programs the use of a keychain or of one item: list, add, revoke.",
        discussion: """
            A grant names a program by what the kernel says of it: its executable's path, the \
            SHA-256 of the file it runs, its systemd unit, its Flatpak app ID, or a program among \
            the processes that started it; every one given must match. It covers the whole \
            keychain or one item, allows or denies (a deny always wins), and lasts until revoked, \
            until a time, for this login session, or for one use. Grants govern the programs the \
            Secret Service and the ssh agent serve; an allow stands in for a collection's \
            AllowedExecutables and for a confirm-each-access collection's question, never for an \
            unlock or an item's own access control (its passcode or biometry).
            """,
        subcommands: [ListGrants.self, AddGrant.self, RevokeGrant.self])
}

/// Which item a grant is for, by its generic password's service and account or by its label.
struct GrantedItem: ParsableArguments {
    @Option(name: .long, help: "The item's service (with --account).")
    var service: String?

    @Option(name: .long, help: "The item's account (with --service).")
    var account: String?

    @Option(name: .long, help: "The item's label (a Secret Service item's), when exactly one item has it.")
    var label: String?

    @Option(name: .long, help: "A key in the TPM, by its label (tpm-keychain key list): the ssh agent's keys.")
    var key: String?

    var namesAnItem: Bool { service != nil || account != nil || label != nil || key != nil }

    /// The item named, found in `service`; nil when none is named.
    func find(in items: ItemService) throws -> ItemQueryResult? {
        guard namesAnItem else { return nil }
        var matching = AttributeList()
        if let key {
            guard service == nil, account == nil, label == nil else {
                throw ValidationError("Name a key by --key alone")
            }
            matching.setString(key, for: AttributeTag.label)
            let keys = try items.query(.key, matching: matching).filter(ItemService.holdsTPMKey)
            guard keys.count == 1, let found = keys.first else {
                throw KeychainError(
                    keys.isEmpty ? .itemNotFound : .invalidParameter,
                    keys.isEmpty ? "No key is labelled so" : "\(keys.count) keys are labelled so")
            }
            return found
        }
        if service != nil || account != nil {
            guard let service, let account, label == nil else {
                throw ValidationError("Name an item by --service and --account, or by --label")
            }
            matching.setString(service, for: AttributeTag.service)
            matching.setString(account, for: AttributeTag.account)
        } else if let label {
            matching.setString(label, for: AttributeTag.label)
        }
        let found = try items.query(.genericPassword, matching: matching)
        guard found.count == 1, let item = found.first else {
            throw KeychainError(
                found.isEmpty ? .itemNotFound : .invalidParameter,
                found.isEmpty
                    ? "No item is named so" : "\(found.count) items are named so: name one by --service and --account")
        }
        return item
    }
}

struct ListGrants: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list", abstract: "List the keychain's grants, or one item's.")

    @OptionGroup var store: KeychainOptions
    @OptionGroup var item: GrantedItem

    func run() throws {
        try reportingErrors {
            try StoreSession.withExisting(store.path) { try perform(in: $0) }
        }
    }

    func perform(in session: StoreSession, output: OutputLine = { print($0) }) throws {
        let items = try ItemService(location: session.location, caller: AccessCaller(face: .cli))
        let target = try item.find(in: items)
        let now = GrantBook.now()
        let grants = try items.grants().filter { grant in
            target.map { grant.item == nil || grant.item == $0.reference } ?? true
        }
        guard !grants.isEmpty else {
            output("No grants: every program of yours may use what the keychain's own rules allow it.")
            return
        }
        for grant in grants.sorted(by: { $0.created < $1.created }) {
            output(Self.describe(grant, now: now))
        }
    }

    /// One line for people: ID, effect, whom, what, how long, why.
    static func describe(_ grant: Grant, now: Int64) -> String {
        var line = "\(grant.id)  \(grant.effect.rawValue)  \(grant.subject.description)"
        if grant.item != nil {
            line += "  item " + DisplayText.quoted(grant.itemLabel ?? "(no label)", limit: 100)
        } else {
            line += "  the whole keychain"
        }
        switch grant.lease {
        case .always: line += "  until revoked"
        case .once: line += "  for one use"
        case .loginSession: line += "  for the login session it was made in"
        case .until(let end):
            line += "  until " + Self.time(end) + (now >= end ? " (expired)" : "")
        }
        if let purpose = grant.purpose { line += "  for " + DisplayText.quoted(purpose, limit: 200) }
        return line
    }

    static func time(_ nanoseconds: Int64) -> String {
        Date(timeIntervalSince1970: Double(nanoseconds) / 1e9).formatted(.iso8601)
    }
}

struct AddGrant: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "add",
        abstract: "Allow or deny a program the keychain, or one item of it; prints the grant's ID.",
        discussion: """
            --program PATH names the program at PATH as it is now: its path and its file's \
            SHA-256, so that a copy elsewhere and a changed file are not covered (what a \
            remembered answer to a prompt records). --sha256-of PATH names the file's contents \
            wherever it lies. Examples:
              tpm-keychain grants add --allow --program /usr/bin/secret-tool --service example.org --account me
              tpm-keychain grants add --deny --ancestor /usr/bin/node
              tpm-keychain grants add --allow --app-id org.signal.Signal --session
            """)

    @Flag(exclusivity: .exclusive, help: "Allow or deny.")
    var effect: GrantEffectFlag

    @Option(name: .long, help: "A program by its path and the SHA-256 of its file now.")
    var program: String?

    @Option(name: .long, help: "The executable's path (/proc/PID/exe).")
    var executable: String?

    @Option(name: .long, help: "The SHA-256 of the file the program runs, as 64 hex digits.")
    var sha256: String?

    @Option(name: .customLong("sha256-of"), help: "The SHA-256 of this file, as it is now.")
    var sha256Of: String?

    @Option(name: .long, help: "The program's systemd unit (for example vscode.service).")
    var unit: String?

    @Option(name: .customLong("app-id"), help: "A Flatpak application ID.")
    var appID: String?

    @Option(name: .long, help: "A program (its executable's path) among those that started the caller.")
    var ancestor: String?

    @OptionGroup var item: GrantedItem

    @Option(name: .long, help: "Until this time (ISO 8601, for example 2026-12-31T18:00:00Z).")
    var until: String?

    @Option(name: .customLong("for-seconds"), help: "For this many seconds from now.")
    var forSeconds: Int?

    @Flag(name: .long, help: "For this login session: not after a logout or a reboot.")
    var session = false

    @Flag(name: .long, help: "For one use.")
    var once = false

    @Option(name: .long, help: "Why, as a prompt or a listing shows it.")
    var purpose: String?

    @OptionGroup var store: KeychainOptions

    func run() throws {
        try reportingErrors {
            try StoreSession.withExisting(store.path) { try perform(in: $0) }
        }
    }

    func subject() throws -> Grant.Subject {
        var subject = Grant.Subject(unit: unit, applicationID: appID, ancestor: ancestor.map(Self.absolute))
        if let program {
            let path = Self.absolute(program)
            guard let hash = ExecutableHashes.hash(ofFileAt: path) else {
                throw KeychainError(.invalidParameter, "\(path) is not a file this user can read")
            }
            subject.executable = Self.resolved(path)
            subject.executableHash = hash
        }
        if let executable {
            guard subject.executable == nil else { throw ValidationError("Give --program or --executable, not both") }
            subject.executable = Self.absolute(executable)
        }
        let hashes = [sha256 != nil, sha256Of != nil, program != nil].filter { $0 }.count
        guard hashes <= 1 else { throw ValidationError("Give one of --program, --sha256 and --sha256-of") }
        if let sha256 {
            guard let hash = [UInt8](hexString: sha256.lowercased()), hash.count == 32 else {
                throw ValidationError("--sha256 takes 64 hex digits")
            }
            subject.executableHash = hash
        }
        if let sha256Of {
            guard let hash = ExecutableHashes.hash(ofFileAt: Self.absolute(sha256Of)) else {
                throw KeychainError(.invalidParameter, "\(sha256Of) is not a file this user can read")
            }
            subject.executableHash = hash
        }
        guard !subject.isEmpty else {
            throw ValidationError(
                "Name the program: --program, --executable, --sha256, --sha256-of, --unit, --app-id or --ancestor")
        }
        return subject
    }

    func lease(now: Int64) throws -> Grant.Lease {
        let given = [until != nil, forSeconds != nil, session, once].filter { $0 }.count
        guard given <= 1 else {
            throw ValidationError("Give at most one of --until, --for-seconds, --session and --once")
        }
        if once { return .once }
        if session {
            guard let current = GrantBook.loginSession(ofProcess: getpid()) else {
                throw KeychainError(.invalidParameter, "This system does not say which login session this is")
            }
            return .loginSession(current)
        }
        if let forSeconds {
            guard forSeconds > 0, forSeconds <= 100 * 366 * 86_400 else {
                throw ValidationError("--for-seconds takes a number of seconds above 0")
            }
            return .until(now + Int64(forSeconds) * 1_000_000_000)
        }
        if let until {
            guard let date = try? Date(until, strategy: .iso8601) else {
                throw ValidationError("--until takes an ISO 8601 time, for example 2026-12-31T18:00:00Z")
            }
            // Nanoseconds since 1970 in 64 bits reach into 2262.
            let seconds = date.timeIntervalSince1970
            guard seconds < Double(Int64.max / 1_000_000_000) else {
                throw ValidationError("--until takes a time before 2262")
            }
            let end = Int64(seconds * 1e9)
            guard end > now else { throw ValidationError("--until \(until) has passed already") }
            return .until(end)
        }
        return .always
    }

    func perform(in session: StoreSession, output: OutputLine = { print($0) }) throws {
        let items = try ItemService(location: session.location, caller: AccessCaller(face: .cli))
        let now = GrantBook.now()
        let target = try item.find(in: items)
        if let purpose, purpose.utf8.count > 1024 || purpose.isEmpty {
            throw ValidationError("--purpose takes 1 to 1024 bytes")
        }
        let grant = Grant(
            id: GrantBook.newID(), effect: effect.effect, subject: try subject(), item: target?.reference,
            itemLabel: target.map { $0.attributes.string(AttributeTag.label) ?? Self.name(of: $0) },
            lease: try lease(now: now), purpose: purpose, created: now)
        try items.addGrant(grant)
        output(grant.id)
    }

    private static func name(of item: ItemQueryResult) -> String {
        "\(item.attributes.string(AttributeTag.service) ?? "") (\(item.attributes.string(AttributeTag.account) ?? ""))"
    }

    static func absolute(_ path: String) -> String {
        StoreDirectory.absolute(path)
    }

    /// The path with its links resolved, as /proc/PID/exe will read for a process running it.
    static func resolved(_ path: String) -> String {
        guard let real = realpath(path, nil) else { return path }
        defer { free(real) }
        return String(cString: real)
    }
}

enum GrantEffectFlag: String, EnumerableFlag {
    case allow, deny

    var effect: Grant.Effect { self == .allow ? .allow : .deny }

    static func help(for value: GrantEffectFlag) -> ArgumentHelp? {
        value == .allow ? "Allow the program." : "Deny the program, whatever else allows it."
    }
}

struct RevokeGrant: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "revoke", abstract: "Remove a grant by its ID.")

    @OptionGroup var store: KeychainOptions

    @Argument(help: "The grant's ID, as grants list shows it.")
    var id: String

    func run() throws {
        try reportingErrors {
            try StoreSession.withExisting(store.path) { try perform(in: $0) }
        }
    }

    func perform(in session: StoreSession, output: OutputLine = { print($0) }) throws {
        guard id.utf8.count == 32, [UInt8](hexString: id) != nil else {
            throw ValidationError("A grant's ID is 32 hex digits, as grants list shows it")
        }
        let items = try ItemService(location: session.location, caller: AccessCaller(face: .cli))
        guard try items.revokeGrant(id: id) else {
            throw KeychainError(.itemNotFound, "This keychain has no grant \(id)")
        }
        output("grant has been revoked.")
    }
}

import ArgumentParser
import CommandLineSupport
import FoundationEssentials
import TPMKeychain
import ToolSupport

#if canImport(Glibc)
import Glibc
#endif

/// `export`: the items that may leave this device, into an archive for a passphrase or for
/// another machine's TPM.
struct Export: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export",
        abstract: "Write the items that may leave this device to an encrypted archive.",
        discussion: """
            As Apple's encrypted backups: items of a ThisDeviceOnly class, items bound to access \
            control (biometry, the device passcode) and keys that live in the TPM stay; they are \
            counted, and listed with --list-skipped. With --passphrase the archive opens on any \
            machine with the passphrase (scrypt, N=2^17 r=8 p=1); with --to it opens only in the \
            TPM that holds that device import key (`tpm-keychain device-key` on the target). The \
            archive is never written over an existing file.
            """)

    @OptionGroup var store: KeychainOptions

    @Option(name: [.short, .long], help: ArgumentHelp("The archive to create.", valueName: "file"))
    var output: String

    @Flag(help: "Protect the archive with a passphrase (asked twice on a terminal).")
    var passphrase = false

    @Option(
        name: .customLong("passphrase-fd"),
        help: ArgumentHelp("Read the passphrase from this file descriptor.", valueName: "fd"))
    var passphraseDescriptor: Int32?

    @Option(
        help: ArgumentHelp(
            "Encrypt for another machine's TPM: its device import key (tkdk1:…), or a file holding it.",
            valueName: "key"))
    var to: String?

    @Flag(name: .customLong("list-skipped"), help: "List each item that stays, and why.")
    var listSkipped = false

    /// For tests only: a cheaper scrypt (N = 2^value); weaker against guessing.
    @Option(name: .customLong("scrypt-log2n"), help: .hidden)
    var scryptLog2N: UInt8?

    func validate() throws {
        guard passphrase || passphraseDescriptor != nil || to != nil else {
            throw ValidationError("Say how to protect the archive: --passphrase, or --to a device import key")
        }
        guard !((passphrase || passphraseDescriptor != nil) && to != nil) else {
            throw ValidationError("--passphrase and --to exclude each other")
        }
    }

    func run() throws {
        try reportingErrors {
            let protection: KeychainArchive.Protection
            if let to {
                protection = .deviceKey(try Self.deviceKey(to))
            } else {
                let input = PasscodeInput(descriptor: passphraseDescriptor)
                let secret = try input.read(prompt: "archive passphrase: ")
                if passphraseDescriptor == nil, isatty(STDIN_FILENO) == 1 {
                    guard try input.read(prompt: "again: ") == secret else {
                        throw CommandFailure(ExitStatus.usage, "the passphrases differ; nothing was written")
                    }
                }
                let text = try PassphraseText.of(secret)
                guard text.count >= 8 else {
                    throw CommandFailure(
                        ExitStatus.usage,
                        "the passphrase is shorter than 8 characters; anyone with the archive could guess it")
                }
                var cost = KeychainArchive.PassphraseCost.standard
                if let scryptLog2N {
                    cost = KeychainArchive.PassphraseCost(log2N: scryptLog2N, blockSize: 8, parallelism: 1)
                }
                protection = .passphrase(text, cost: cost)
            }
            let output = StoreDirectory.absolute(output)
            let report = try StoreSession.withExisting(store.path) { session in
                let bar = ProgressBar(enabled: isatty(2) == 1)
                defer { bar.finish() }
                let location = session.location
                return try waitFor {
                    try await KeychainArchive.export(from: location, to: output, protection: protection) {
                        done in
                        if done % 100 == 0 { bar.show(count: done, "items read") }
                    }
                }
            }
            print("exported \(report.exported) items to \(output)")
            if !report.skipped.isEmpty {
                let counts = Dictionary(grouping: report.skipped, by: \.reason.description).map {
                    "\($0.value.count) because \($0.key)"
                }
                print("left on this device: \(report.skipped.count) items (\(counts.sorted().joined(separator: "; ")))")
                if listSkipped { for item in report.skipped { print("  \(item)") } }
            }
        }
    }

    /// A device import key given as text or as a file holding it.
    static func deviceKey(_ argument: String) throws -> DeviceImportKey {
        if argument.hasPrefix("tkdk") { return try DeviceImportKey(argument) }
        guard let text = try? String(contentsOfFile: argument, encoding: .utf8) else {
            throw CommandFailure(
                ExitStatus.noInput, "\(argument) is neither a device import key (tkdk1:…) nor a readable file")
        }
        return try DeviceImportKey(text)
    }
}

/// `import`: an export archive, or another keyring's export, into a store.
struct Import: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Import an export archive, a pass store, or a password manager's CSV or JSON export.",
        discussion: """
            The archive is checked whole before anything is written; then its items are written \
            one by one, in order, each whole. An archive made with --to opens with this store's \
            device import key. Nothing in the source is changed. docs/IMPORTING.md lists the CSV \
            and JSON columns understood and how pass entries map to items.
            """)

    enum Format: String, ExpressibleByArgument, CaseIterable {
        case archive, pass, csv, json
    }

    enum Conflicts: String, ExpressibleByArgument, CaseIterable {
        case skip, replace
        case keepBoth = "keep-both"

        var policy: KeychainArchive.ConflictPolicy {
            switch self {
            case .skip: .skip
            case .replace: .replace
            case .keepBoth: .keepBoth
            }
        }
    }

    @OptionGroup var store: KeychainOptions

    @Argument(help: ArgumentHelp("The archive, pass store directory, or export file.", valueName: "source"))
    var source: String

    @Option(help: "What the source is (default: pass for a directory, csv or json by extension, else archive).")
    var format: Format?

    @Option(help: "What to do with an item the store has already: skip, replace or keep-both.")
    var conflicts: Conflicts = .skip

    @Flag(name: .customLong("dry-run"), help: "Check the source and list what would change; write nothing.")
    var dryRun = false

    @Option(
        name: .customLong("passphrase-fd"),
        help: ArgumentHelp("Read an archive's passphrase from this file descriptor.", valueName: "fd"))
    var passphraseDescriptor: Int32?

    @Option(
        name: .customLong("access-group"),
        help: ArgumentHelp(
            "Write only items of this access group (repeatable; \"\" for items of none); skip and list the others. Use it for an archive from someone else, so that it cannot plant items in another app's group.",
            valueName: "group"))
    var accessGroups: [String] = []

    func run() throws {
        try reportingErrors {
            let source = StoreDirectory.absolute(source)
            var isDirectory = false
            guard FileManager.default.fileExists(atPath: source, isDirectory: &isDirectory) else {
                throw CommandFailure(ExitStatus.noInput, "\(source) does not exist")
            }
            let format =
                format
                ?? (isDirectory
                    ? .pass
                    : source.hasSuffix(".csv") ? .csv : source.hasSuffix(".json") ? .json : .archive)
            let policy = conflicts.policy
            let dryRun = dryRun
            let groups = accessGroups.isEmpty ? nil : Set(accessGroups)
            if format == .archive {
                let passphrase: String?
                switch try KeychainArchive.kind(ofArchiveAt: source) {
                case .passphrase:
                    passphrase = try PassphraseText.of(
                        try PasscodeInput(descriptor: passphraseDescriptor).read(prompt: "archive passphrase: "))
                case .deviceKey: passphrase = nil
                }
                let report = try StoreSession.with(store.path) { session in
                    let bar = ProgressBar(enabled: isatty(2) == 1 && !dryRun)
                    defer { bar.finish() }
                    let location = session.location
                    return try waitFor {
                        try await KeychainArchive.importArchive(
                            at: source, into: location, passphrase: passphrase, conflicts: policy,
                            accessGroups: groups, dryRun: dryRun
                        ) { done, total in bar.show(done, of: total) }
                    }
                }
                Self.show(report, dryRun: dryRun)
                return
            }
            let read = try ForeignSource.read(source, format: format)
            for skipped in read.skipped { printError("tpm-keychain: not imported: \(skipped.reason)") }
            let report = try StoreSession.with(store.path) { session in
                try ForeignSource.write(
                    read.items, into: session.location, policy: policy, accessGroups: groups, dryRun: dryRun)
            }
            Self.show(report, dryRun: dryRun)
        }
    }

    static func show(_ report: KeychainArchive.ImportReport, dryRun: Bool) {
        if dryRun {
            for change in report.planned { print(change) }
            let adds = report.planned.filter { $0.action != .skip }.count
            print(
                "dry run: \(adds) items would be written, \(report.planned.count - adds) skipped; nothing was changed")
            return
        }
        print(
            "imported: \(report.added) added, \(report.replaced) replaced, \(report.keptBoth) kept beside an existing item, \(report.skipped.count) skipped"
        )
        for item in report.skipped { print("  skipped \(item)") }
    }
}

/// `device-key`: the public key other machines export to.
struct DeviceKey: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "device-key",
        abstract:
            "Print this store's device import key, made in the TPM on first use, for another machine's export --to.",
        discussion: """
            The private half never leaves the TPM. An archive made for this key opens only here, \
            and no longer after the TPM is cleared. Compare the fingerprint (on standard error) on \
            both machines when the key travels over a channel someone else could change.
            """)

    @OptionGroup var store: KeychainOptions

    func run() throws {
        try reportingErrors {
            let key = try StoreSession.with(store.path) { session in
                try KeychainArchive.deviceImportKey(for: session.location)
            }
            print(key)
            printError("fingerprint: \(key.fingerprint)")
        }
    }
}

/// A passphrase as text: scrypt takes its UTF-8 bytes.
enum PassphraseText {
    static func of(_ secret: SecretBytes) throws -> String {
        guard let text = secret.withUnsafeBytes({ String(validating: $0, as: UTF8.self) }) else {
            throw CommandFailure(ExitStatus.usage, "the passphrase is not UTF-8 text")
        }
        return text
    }
}

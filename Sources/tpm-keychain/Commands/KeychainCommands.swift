import ArgumentParser
import CommandLineSupport
import FoundationEssentials
import SystemCalls
import TPMKeychain
import ToolSupport

/// A keychain argument as `security` takes one: a name (a store in the data directory) or a path.
enum KeychainArgument {
    static func path(_ argument: String) throws -> String {
        if argument.contains("/") || argument.hasPrefix("~") { return StoreDirectory.absolute(argument) }
        return try KeychainLocation.named(argument).path
    }
}

/// `security create-keychain`: a new store, its master key sealed to the TPM now.
struct CreateKeychain: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "create-keychain",
        abstract: "Create a keychain store (a name in the data directory, or a path), its master key sealed to the TPM."
    )

    @Argument(
        help: ArgumentHelp("A store name (kept in the data directory) or a directory path.", valueName: "keychain"))
    var keychain: String

    @Flag(name: .customLong("recovery-key"), help: "Also add a recovery key, and print it once (see add-recovery-key).")
    var withRecoveryKey = false

    @Option(
        name: .customLong("group"),
        help: ArgumentHelp(
            "Share the store with the members of this Unix group (directories 2770, files 0660 in that group). The parent directory must exist; every member needs the same TPM (TPM_KEYCHAIN_TCTI or /dev/tpmrm0).",
            valueName: "group"))
    var group: String?

    func run() throws {
        try reportingErrors {
            let path = try KeychainArgument.path(keychain)
            let session = try StoreSession(path: path)
            defer { session.close() }
            do {
                if let group {
                    try session.location.createStore(sharedWithGroup: group)
                } else {
                    try session.location.createStore()
                }
                if withRecoveryKey { RecoveryKeyOutput.show(try session.location.addRecoveryKey(), for: path) }
            } catch let error as KeychainError where error.code == .duplicateItem {
                throw CommandFailure(ExitStatus.duplicateItem, "a keychain store already exists at \(path)")
            }
        }
    }
}

/// `security delete-keychain`: the store's files are deleted (its keys were never anywhere else).
struct DeleteKeychain: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "delete-keychain",
        abstract: "Delete a keychain store and every item in it, for good.")

    @Argument(help: ArgumentHelp("A store name or a directory path.", valueName: "keychain"))
    var keychain: String

    func run() throws {
        try reportingErrors {
            try KeychainLocation(path: try KeychainArgument.path(keychain)).removeStore()
        }
    }
}

/// Rotates a store's master key (security has no such verb: a macOS keychain's keys live in
/// the Secure Enclave or are derived from the login password).
struct RotateKeys: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rotate-keys",
        abstract: "Replace a keychain store's master key with a new one sealed to the TPM, re-encrypting every item.",
        discussion: """
            Crash-safe: interrupted at any point, the store keeps either the old key and files or \
            the new ones. Protected items (biometry, the device passcode) are re-encrypted too, which \
            needs them opened: the command asks once per protection in use.
            """)

    @OptionGroup var store: KeychainOptions
    @OptionGroup var passcodeOptions: PasscodeOptions

    func run() throws {
        try reportingErrors {
            let path = store.path
            try StoreSession.withExisting(path) { session in
                // One passcode for every passcode-protected record: asked (or read) once.
                let input = PasscodeInput(passcodeOptions)
                let remembered = Locked<SecretBytes?>(nil)
                let source = PasscodeSource.secret { reason in
                    if let known = remembered.withLock({ $0 }) { return known }
                    let passcode = try? input.read(prompt: "device passcode to \(reason): ")
                    remembered.withLock { $0 = passcode }
                    return passcode
                }
                let context = AuthenticationContext(
                    authenticator: CommandAuthentication.authenticator, passcode: source,
                    applicationIdentifier: "tpm-keychain", location: session.location)
                context.localizedReason = "rotate the keychain's master key"
                let location = session.location
                let rotation = try waitFor { try await location.rotateKeys(context: context) }
                print(
                    "rotated the master key of \(path): \(rotation.items) items and \(rotation.keyRecords) key records re-encrypted"
                )
            }
        }
    }
}

/// Deletes the items that can never open again on this device, proven with the TPM's counters.
struct PurgeInvalidated: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "purge-invalidated",
        abstract:
            "Delete the items that can never be read again on this device (an enrollment changed, a passcode was removed).",
        discussion: """
            Reading such an item reports it (exit 44) and keeps it: the reader may be another \
            device, another member of a shared store, or a process with another state directory. \
            This command deletes them once the TPM's counters prove they can never open here: \
            biometryCurrentSet items after an enrollment change, and items that needed a device \
            passcode this device has removed. Items of other devices are kept.
            """)

    @OptionGroup var store: KeychainOptions

    func run() throws {
        try reportingErrors {
            let path = store.path
            try StoreSession.withExisting(path) { session in
                let purge = try session.location.purgeInvalidatedItems()
                print(
                    "purged \(path): \(purge.items) items and \(purge.keyRecords) key records that can never open again on this device"
                )
            }
        }
    }
}

/// Adds a recovery key to a store: the way back after its TPM is cleared or replaced.
struct AddRecoveryKey: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "add-recovery-key",
        abstract: "Add a recovery key to a keychain store (replacing any earlier one) and print it once.",
        discussion: """
            The key (8 groups of 8 letters) is printed on standard output and kept nowhere on this \
            machine: write it down, or store it away from the machine. With it, `recover` seals \
            the store to a new or cleared TPM, and `recover-passcode` makes the device passcode \
            work again should the TPM lose its passcode counter (the passcode key is escrowed to it \
            when the passcode is next set or changed). Whoever has it and a copy of the store's \
            files can read the items without the TPM.
            """)

    @OptionGroup var store: KeychainOptions

    func run() throws {
        try reportingErrors {
            let path = store.path
            try StoreSession.withExisting(path) { session in
                RecoveryKeyOutput.show(try session.location.addRecoveryKey(), for: path)
                if (try? KeychainDevice(location: session.location).status().passcodeIsSet) == true {
                    // The passcode key is escrowed when the passcode is set or changed.
                    printError(
                        "tpm-keychain: to escrow the device passcode to this recovery key (recover-passcode), change it once: tpm-keychain change-passcode (the same passcode may be given again)"
                    )
                }
            }
        }
    }
}

/// Seals a store to this machine's TPM with its recovery key.
struct Recover: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "recover",
        abstract:
            "Seal a keychain store to this TPM with its recovery key, after the TPM that sealed it was cleared or replaced.",
        discussion: """
            The recovery key is read from the terminal (no echo), from --recovery-key-fd, or from \
            standard input. Items are kept, except those bound to the old TPM by design: \
            this-device-only items and items behind access control (biometry, passcode).
            """)

    @OptionGroup var store: KeychainOptions

    @Option(
        name: .customLong("recovery-key-fd"),
        help: ArgumentHelp("Read the recovery key from this file descriptor.", valueName: "fd"))
    var descriptor: Int32?

    func run() throws {
        try reportingErrors {
            let path = store.path
            try KeychainLocation(path: path).checkStore()
            let typed = try PasscodeInput(descriptor: descriptor).read(prompt: "recovery key for \(path): ")
            let key = try RecoveryKey(typed: typed)
            let session = try StoreSession(path: path)
            defer { session.close() }
            let report = try session.location.recover(with: key)
            print(
                "recovered \(path): \(report.itemsKept) items kept, \(report.itemsRemoved) items bound to the old TPM removed"
            )
        }
    }
}

/// A store whose rollback counter is gone and which has no recovery key: its files accepted as they are.
struct AcceptRollbackRisk: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "accept-rollback-risk",
        abstract:
            "Accept a keychain store's files as they are when its TPM rollback counter is gone and it has no recovery key.",
        discussion: """
            Anyone with the TPM owner's authorization can undefine a store's counter; the store then \
            refuses to open (exit 65, rollbackCounterMissing). This gives it a new counter, for whoever \
            the TPM unseals its master key for. An older copy of an item put back before this is then \
            accepted as current: restore the newest backup first when in doubt. Type the store's path \
            again with --confirm.
            """)

    @OptionGroup var store: KeychainOptions

    @Option(help: ArgumentHelp("The store's path, typed again.", valueName: "path"))
    var confirm: String

    func run() throws {
        try reportingErrors {
            let path = store.path
            guard confirm == path else {
                throw CommandFailure(
                    ExitStatus.usage, "--confirm must repeat the store's path (\(path)); nothing was changed")
            }
            try KeychainLocation(path: path).checkStore()
            let session = try StoreSession(path: path)
            defer { session.close() }
            let items = try session.location.acceptFilesAsTheyAre()
            print("accepted the \(items) items of \(path) as they are, under a new rollback counter")
        }
    }
}

enum RecoveryKeyOutput {
    static func show(_ key: RecoveryKey, for path: String) {
        print(key.text)
        printError(
            "tpm-keychain: this is the recovery key of \(path); it is shown only now. Keep it away from this machine: with it, recover seals the store to another TPM"
        )
    }
}

/// `security list-keychains`: the stores in the data directory, quoted as security prints them.
struct ListKeychains: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list-keychains",
        abstract: "List the keychain stores in the data directory ($XDG_DATA_HOME/tpm-keychain).")

    func run() throws {
        for name in KeychainLocation.storeNames() {
            print("    \"\(KeychainLocation.dataDirectory)/\(name)\"")
        }
    }
}

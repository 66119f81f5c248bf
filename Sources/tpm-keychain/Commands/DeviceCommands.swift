import ArgumentParser
import CommandLineSupport
import FoundationEssentials
import TPMKeychain
import ToolSupport

#if canImport(Glibc)
import Glibc
#endif

/// `set-passcode`: the device passcode, held by the TPM (never stored).
struct SetPasscode: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "set-passcode",
        abstract: "Set the device passcode (the TPM limits guesses with its dictionary-attack lockout).")

    @OptionGroup var store: KeychainOptions
    @OptionGroup var passcodeOptions: PasscodeOptions

    func run() throws {
        try reportingErrors {
            let input = PasscodeInput(passcodeOptions)
            let passcode = try input.read(prompt: "new device passcode: ")
            if isatty(STDIN_FILENO) == 1 && passcodeOptions.passcodeDescriptor == nil {
                guard try input.read(prompt: "again: ") == passcode else {
                    throw CommandFailure(ExitStatus.usage, "the passcodes differ; nothing was set")
                }
            }
            try StoreSession.with(store.path) { try KeychainDevice(location: $0.location).setPasscode(passcode) }
        }
    }
}

/// `change-passcode`: one sealed key replaced, no item rewritten, the old one revoked by the TPM.
struct ChangePasscode: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "change-passcode",
        abstract: "Change the device passcode; a copy of the old sealed passcode key stops working.")

    @OptionGroup var store: KeychainOptions
    @OptionGroup var passcodeOptions: PasscodeOptions

    func run() throws {
        try reportingErrors {
            let input = PasscodeInput(passcodeOptions)
            let old = try input.read(prompt: "current device passcode: ")
            let new = try input.read(prompt: "new device passcode: ")
            try StoreSession.with(store.path) {
                try KeychainDevice(location: $0.location).changePasscode(from: old, to: new)
            }
        }
    }
}

/// `recover-passcode`: the passcode made to work again with the store's recovery key, after the
/// TPM lost the device's passcode counter.
struct RecoverPasscode: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "recover-passcode",
        abstract:
            "Make the device passcode work again with the store's recovery key, after the TPM lost its passcode counter.",
        discussion: """
            Anyone who may use a TPM whose owner hierarchy has no password can delete the device's \
            passcode counter; the passcode then cannot be checked (unlock-keychain says so). When \
            the passcode was set or last changed while this store had a recovery key, its key was \
            escrowed to that recovery key: this seals the same key under a new passcode, so every \
            item protected by the passcode opens again, and the keychain starts locked. Reads the \
            recovery key, then the new passcode (twice on a terminal; from --passcode-fd, one line \
            each).
            """)

    @OptionGroup var store: KeychainOptions
    @OptionGroup var passcodeOptions: PasscodeOptions

    func run() throws {
        try reportingErrors {
            let input = PasscodeInput(passcodeOptions)
            let key = try RecoveryKey(typed: try input.read(prompt: "recovery key for \(store.path): "))
            let new = try input.read(prompt: "new device passcode: ")
            try StoreSession.with(store.path) {
                try KeychainDevice(location: $0.location).reestablishPasscode(recoveryKey: key, newPasscode: new)
            }
            print("the device passcode works again (the new one); the keychain is locked: unlock-keychain")
        }
    }
}

/// `remove-passcode`: items that need the passcode become unreadable for good.
struct RemovePasscode: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "remove-passcode",
        abstract:
            "Remove the device passcode. Items that require it (devicePasscode, whenPasscodeSetThisDeviceOnly) become unreadable for good."
    )

    @OptionGroup var store: KeychainOptions
    @OptionGroup var passcodeOptions: PasscodeOptions

    func run() throws {
        try reportingErrors {
            let old = try PasscodeInput(passcodeOptions).read(prompt: "current device passcode: ")
            try StoreSession.with(store.path) { try KeychainDevice(location: $0.location).removePasscode(old) }
        }
    }
}

/// `lock-keychain`: whenUnlocked items are refused by the TPM until the next unlock.
struct LockKeychain: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "lock-keychain",
        abstract: "Lock the keychain: items of the whenUnlocked classes are refused (by the TPM) until unlock-keychain."
    )

    @OptionGroup var store: KeychainOptions

    func run() throws {
        try reportingErrors {
            try StoreSession.with(store.path) { try KeychainDevice(location: $0.location).lock() }
        }
    }
}

/// `unlock-keychain`: the passcode, checked by the TPM.
struct UnlockKeychain: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "unlock-keychain",
        abstract: "Unlock the keychain with the device passcode (a wrong one counts toward the TPM's lockout).")

    @OptionGroup var store: KeychainOptions
    @OptionGroup var passcodeOptions: PasscodeOptions

    func run() throws {
        try reportingErrors {
            let passcode = try PasscodeInput(passcodeOptions).read(prompt: "device passcode: ")
            try StoreSession.with(store.path) { try KeychainDevice(location: $0.location).unlock(passcode: passcode) }
        }
    }
}

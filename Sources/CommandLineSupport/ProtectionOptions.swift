package import ArgumentParser
package import TPMKeychain

/// `--access-control` and `--accessible`: how a new item or key is protected, for every verb
/// that makes one (add-generic-password, key create).
package struct ProtectionOptions: ParsableArguments {
    package init() {}

    @Option(
        name: .customLong("access-control"),
        help: ArgumentHelp(
            "Who may read the item or use the key, as SecAccessControl flags separated by commas: userPresence, biometryAny, biometryCurrentSet, devicePasscode, or, and. Enforced by the TPM.",
            valueName: "flags"))
    package var flags: String?

    @Option(
        name: .customLong("accessible"),
        help: ArgumentHelp(
            "When the item or key is usable (kSecAttrAccessible): whenUnlocked (default), afterFirstUnlock, whenPasscodeSetThisDeviceOnly, whenUnlockedThisDeviceOnly, afterFirstUnlockThisDeviceOnly, always, alwaysThisDeviceOnly. The lock-state classes are enforced by the TPM only for items written while a device passcode is set (set-passcode): without one the device is always unlocked, and a whenUnlocked item is as readable as an always one.",
            valueName: "class"))
    package var accessible: String?

    /// Whether either option was given.
    package var given: Bool { flags != nil || accessible != nil }

    /// The access control the options give; nil when neither was given.
    ///
    /// - Throws: ``CommandFailure`` (usage) for an unknown flag or class, or a combination the
    ///   library refuses.
    package func accessControl() throws -> AccessControl? {
        try AccessControlArgument.parse(flags: flags, accessible: accessible)
    }
}

/// How a daemon asks the person (the Secret Service's unlocks, the ssh agent's protected keys):
/// `--passcode-command`, `--fprintd` and the hidden `--fprintd-address`.
package struct PersonPromptOptions: ParsableArguments {
    package init() {}

    @Option(
        name: .customLong("passcode-command"),
        help: ArgumentHelp(
            "A command that asks the person for the device passcode when an unlock or a key needs it, and prints it (for example: systemd-ask-password --no-tty \"$TPM_KEYCHAIN_PROMPT_REASON\"; the reason says what asks and why). Its exit status other than 0 cancels.",
            valueName: "command"))
    package var passcodeCommand: String?

    @Flag(help: "Use fprintd (system bus) where an unlock or a key asks for biometry.")
    package var fprintd = false

    @Option(
        name: .customLong("fprintd-address"),
        help: ArgumentHelp("fprintd's bus, instead of the system bus.", visibility: .hidden))
    package var fprintdAddress: String?

    /// Whether fprintd is to be asked (on ``fprintdAddress``, or the system bus when nil).
    package var asksFprintd: Bool { fprintd || fprintdAddress != nil }
}

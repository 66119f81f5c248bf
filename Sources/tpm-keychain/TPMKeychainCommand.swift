import ArgumentParser
import CommandLineSupport
import FoundationEssentials
import ToolSupport

#if canImport(Glibc)
import Glibc
#endif

@main
struct TPMKeychainCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tpm-keychain",
        abstract:
            "A keychain for Linux whose master key is sealed to the TPM, with the verbs of macOS's security tool.",
        discussion: """
            The TPM is chosen as follows: \(TPMConfigurationHelp.text)

            \(ExitStatus.helpText)
            """,
        subcommands: [
            AddGenericPassword.self, FindGenericPassword.self, DeleteGenericPassword.self, DumpKeychain.self,
            AddInternetPassword.self, FindInternetPassword.self, DeleteInternetPassword.self,
            CreateKeychain.self, DeleteKeychain.self, ListKeychains.self, RotateKeys.self, PurgeInvalidated.self,
            AddRecoveryKey.self, Recover.self, AcceptRollbackRisk.self,
            SetPasscode.self, ChangePasscode.self, RecoverPasscode.self, RemovePasscode.self, LockKeychain.self,
            UnlockKeychain.self,
            TPMStatus.self, ResetLockout.self, Doctor.self, LoginUnlock.self, PAMHook.self, FollowScreenLock.self,
            HoldSession.self,
            GrantCommands.self, AuditCommands.self, Confirm.self, KeyCommand.self, Export.self, Import.self,
            DeviceKey.self,
            SecretServiceCommand.self, Demo.self,
        ])

    /// Guards the process before ArgumentParser sees the arguments.
    static func main() {
        CommandStart.prepare()
        PasswordArgument.hide()
        if let lookup = ScriptedLookup.parse(Array(CommandLine.arguments.dropFirst())),
            let status = ScriptedLookup.run(lookup)
        {
            Glibc.exit(status)
        }
        main(nil)
    }
}

enum TPMConfigurationHelp {
    static let text = [
        "TPM_KEYCHAIN_TCTI if set (for example swtpm:host=127.0.0.1,port=2321); else the simulated TPM",
        "the store was created with (state in <store>/swtpm); else the hardware TPM at /dev/tpmrm0 when",
        "this user may open it; else a private swtpm started for the command, whose state is kept in the",
        "store directory so later runs (and the TPMKeychain library) use the same simulated TPM. A",
        "simulated TPM is always reported as such; it listens on a private Unix socket only.",
    ].joined(separator: " ")
}

import ArgumentParser
import CommandLineSupport
import FoundationEssentials
import TPM
import TPMKeychain
import ToolSupport

/// Ends a dictionary-attack lockout of the store's TPM, when its lockout hierarchy has no
/// password: the way out for the embedded simulated TPM, which runs only while a command does and
/// so never accumulates the uptime a TPM needs to recover by itself.
struct ResetLockout: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "reset-lockout",
        abstract:
            "End the TPM's dictionary-attack lockout (TPM2_DictionaryAttackLockReset) when its lockout hierarchy has no password.",
        discussion: """
            Meant for the simulated TPM the tool starts for a store on a machine without a hardware TPM. \
            On a TPM whose lockout hierarchy has a password nothing is tried (a wrong guess would lock \
            that hierarchy too); its owner can use tpm2_dictionarylockout --clear-lockout --auth <password>.
            """)

    @OptionGroup var store: KeychainOptions

    func run() throws {
        try reportingErrors {
            // Automatic, never a new simulated TPM: only an existing one can be locked out.
            let session = try StoreSession(path: store.path, choice: .automatic, announceSimulation: false)
            defer { session.close() }
            let tpm = try TPMConnection(session.tpm.configuration)
            defer { tpm.close() }
            let before = try tpm.dictionaryAttackStatus()
            try tpm.resetDictionaryAttackLockout()
            let after = try tpm.dictionaryAttackStatus()
            print("tpm:     \(session.tpm.summary)")
            print(
                "before:  \(before.failedAuthorizations) failed authorizations\(before.inLockout ? ", IN LOCKOUT" : "")"
            )
            print(
                "after:   \(after.failedAuthorizations) failed authorizations\(after.inLockout ? ", IN LOCKOUT" : "")")
        }
    }
}

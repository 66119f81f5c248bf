import ArgumentParser
import Foundation
import TPM
import TPMKeychain

/// Which TPM the keychain would use, what it is, and its dictionary-attack state.
struct TPMStatus: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tpm-status",
        abstract: "Show which TPM is used (hardware or SIMULATED), its storage key and its counters.")

    @OptionGroup var store: KeychainOptions

    func run() throws {
        try reportingErrors {
            let path = store.path
            // Before the session: an embedded simulator creates the directory for its state.
            let storeExists = try KeychainLocation(path: path).storeExists
            let session = try StoreSession(path: path, announceSimulation: false)
            defer { session.close() }
            let selection = session.tpm
            let tpm = try TPMConnection(selection.configuration)
            defer { tpm.close() }
            let description = try tpm.describe()
            let storageKey = try tpm.storageKey()
            let status = try tpm.dictionaryAttackStatus()
            let lockout = status.inLockout ? "IN LOCKOUT" : "not in lockout"
            print("tpm:          \(selection.summary)")
            print("tcti:         \(selection.configuration.tcti)")
            print("simulated:    \(selection.isSimulated ? "yes" : "no")")
            print("manufacturer: \(description.manufacturer) (\(description.vendor)), firmware \(description.firmwareVersion)")
            print("storage key:  \(storageKey.algorithm.rawValue), name \(storageKey.name.hexString)")
            print("counters:")
            print("    lockout counter:   \(status.failedAuthorizations) failed authorizations (\(lockout))")
            print("    max tries:         \(status.maxAuthorizationFailures)")
            print("    recovery interval: \(status.recoveryInterval) s (one failure forgotten per interval\(status.recoveryInterval == 0 ? "; 0: protection off" : ""))")
            print("    lockout recovery:  \(status.lockoutRecovery) s")
            print("    NV counters:       \(status.nvCounters) defined")
            print("keychain:     \(SecurityFormat.quoted(path)) (\(storeExists ? "exists" : "does not exist yet"))")
        }
    }
}

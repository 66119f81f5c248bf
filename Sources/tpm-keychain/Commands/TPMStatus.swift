import ArgumentParser
import CommandLineSupport
import FoundationEssentials
import SystemCalls
import TPM
import TPMKeychain
import ToolSupport
import WireFormat

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
            // One connection at a time: the device status below opens its own.
            let (description, storageKey, status) = try {
                let tpm = try TPMConnection(selection.configuration)
                defer { tpm.close() }
                return (try tpm.describe(), try tpm.storageKey(), try tpm.dictionaryAttackStatus())
            }()
            let lockout = status.inLockout ? "IN LOCKOUT" : "not in lockout"
            // What the TPM says it is counts, not only how it is reached.
            let simulated = selection.isSimulated || description.isSimulator || session.isSimulated
            print(
                "tpm:          \(selection.summary)"
                    + (simulated && !selection.isSimulated
                        ? ", but it reports itself as a software TPM: SIMULATED" : ""))
            print("tcti:         \(selection.configuration.tcti)")
            print("simulated:    \(simulated ? "yes" : "no")")
            print(
                "manufacturer: \(description.manufacturer) (\(description.vendor)), firmware \(description.firmwareVersion)"
            )
            print("storage key:  \(storageKey.algorithm.rawValue), name \(storageKey.name.hexString)")
            print(
                "esapi crypto: \(ESAPICryptoContext.status) (\(ESAPICryptoContext.library ?? "libtss2-esys not found"); TPM_KEYCHAIN_ESYS_SHARED_CONTEXT=0 turns it off)"
            )
            print("counters:")
            print("    lockout counter:   \(status.failedAuthorizations) failed authorizations (\(lockout))")
            print("    max tries:         \(status.maxAuthorizationFailures)")
            print(
                "    recovery interval: \(status.recoveryInterval) s (one failure forgotten per interval\(status.recoveryInterval == 0 ? "; 0: protection off" : ""))"
            )
            print("    lockout recovery:  \(status.lockoutRecovery) s")
            print("    NV counters:       \(status.nvCounters) defined")
            let device = try KeychainDevice(location: session.location).status()
            func counter(_ value: UInt64?) -> String { value.map(String.init) ?? "not defined yet" }
            func handle(_ value: UInt32) -> String { "0x" + value.hexString(width: 8) }
            print("device:       \(SecurityFormat.quoted(device.directory))")
            print("    passcode:          \(device.passcodeIsSet ? "set" : "not set")")
            func index(_ position: Int) -> String {
                device.nvIndices.count == 3 ? "NV " + handle(device.nvIndices[position]) : "no NV index yet"
            }
            if device.nvIndices.isEmpty {
                print("    NV indices:        none yet (made with the first passcode, enrollment or protected item)")
            } else if device.nvIndicesOpenToOtherUsers {
                print(
                    "    NV indices:        version 1's: any TPM user can move, write or undefine them (a device made anew has indices only it can write)"
                )
            } else {
                print("    NV indices:        the device's own: written only with its secret, sealed to this TPM")
            }
            print(
                "    enrollment counter: \(counter(device.enrollmentCounter)) (\(index(0)); +1 per enrollment change)")
            print(
                "    passcode counter:  \(counter(device.passcodeCounter)) (\(index(1)); +1 per passcode change or removal)"
            )
            let lock: String
            switch (device.unlockedSinceBoot, device.unlocked) {
            case (nil, _), (_, nil): lock = "not defined yet"
            case (false?, _): lock = "locked since the TPM's last reset (reboot)"
            case (true?, true?): lock = "unlocked"
            case (true?, false?): lock = "locked"
            }
            print("    lock state:        \(lock) (\(index(2)), cleared at TPM reset)")
            print("keychain:     \(SecurityFormat.quoted(path)) (\(storeExists ? "exists" : "does not exist yet"))")
            if storeExists {
                if let protection = try session.location.rollbackProtection() {
                    print(
                        "    rollback protection: on (counter NV \(handle(protection.counterIndex)), epoch \(protection.epoch); +1 per writing process, and per 10 minutes of writing)"
                    )
                } else {
                    print(
                        "    rollback protection: OFF (this TPM could not hold the store's counter: older copies and deleted files are not detected)"
                    )
                }
            }
        }
    }
}

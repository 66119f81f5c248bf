import Foundation
import TPM
import TPMKeychain
import TPMKeychainTesting
import Testing

/// What a store reports when its TPM changed under it: each case its own error.
@Suite struct TPMChangeTests {
    @Test(
        "a cleared TPM (new owner seed) is wrongTPM, with what happened and what to do; an unreachable one is tpmUnavailable"
    )
    func clearedAndUnreachable() throws {
        let store = try TestStore()
        let keychain = try store.keychain()
        try keychain.set("sealed before the clear", forKey: "k")
        Keychain.closeStore(store.location)

        // TPM2_Clear with the (empty) lockout authorization: a new storage seed.
        let cleared = try TPM2Tools.run(["tpm2_clear", "-c", "l"], tcti: store.simulator.tcti)
        #expect(cleared.status == 0, "\(cleared.errorOutput)")
        do {
            _ = try keychain.string(forKey: "k")
            Issue.record("a store opened on a cleared TPM")
        } catch {
            #expect(error.code == .wrongTPM, "\(error)")
            #expect(error.message.contains("cleared"), "\(error.message)")
        }
        // The files are untouched: nothing was re-initialised over them.
        #expect(try store.itemFiles().count == 1)

        Keychain.closeStore(store.location)
        store.simulator.stop()
        do {
            _ = try keychain.string(forKey: "k")
            Issue.record("a store opened without its TPM")
        } catch {
            #expect(error.code == .tpmUnavailable || error.code == .timedOut, "\(error)")
        }
    }
}

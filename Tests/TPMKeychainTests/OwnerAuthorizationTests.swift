import Foundation
import TPM
import TPMKeychain
import TPMKeychainTesting
import Testing

@testable import KeychainStore

/// A TPM whose owner hierarchy has a password (tpm2_changeauth -c owner).
@Suite struct OwnerAuthorizationTests {
    static let ownerPassword = "owner password 0042"

    @Test(
        "without the owner password every open fails with its own clear error and the DA counter never moves; with it, stores and NV work"
    )
    func ownerPassword() throws {
        let store = try TestStore()
        let changed = try TPM2Tools.run(
            ["tpm2_changeauth", "-c", "owner", Self.ownerPassword], tcti: store.simulator.tcti)
        #expect(changed.status == 0, "\(changed.errorOutput)")
        let plain = TPMConfiguration(tcti: store.simulator.tcti, ownerAuthorization: nil)
        #expect(
            plain.ownerAuthorization == nil || ProcessInfo.processInfo.environment["TPM_KEYCHAIN_OWNER_AUTH"] != nil)
        let before = try Self.failedAuthorizations(store)
        for attempt in 0..<50 {
            let configuration = TPMConfiguration(
                tcti: store.simulator.tcti,
                ownerAuthorization: attempt.isMultiple(of: 2)
                    ? nil : SecretBytes(copying: Array("guess \(attempt)".utf8)))
            do {
                _ = try ItemStore.open(at: store.directory + "/attempt-\(attempt)", tpm: configuration)
                Issue.record("a store was created without the owner password")
            } catch {
                #expect(error.code == .authenticationFailed, "\(error)")
                #expect(error.message.contains("TPM_KEYCHAIN_OWNER_AUTH"), "\(error.message)")
            }
        }
        #expect(
            try Self.failedAuthorizations(store) == before,
            "owner authorization failures must not count toward the lockout")

        let right = TPMConfiguration(
            tcti: store.simulator.tcti, ownerAuthorization: SecretBytes(copying: Array(Self.ownerPassword.utf8)))
        let opened = try ItemStore.open(at: store.directory + "/with-owner", tpm: right)
        try opened.write(
            ItemIdentity(accessGroup: "", service: "svc", account: "a"), mode: .add,
            value: ItemValue(kind: .data, bytes: [1, 2, 3]),
            changes: AttributeChanges())
        #expect(try opened.value(ItemIdentity(accessGroup: "", service: "svc", account: "a"))?.bytes == [1, 2, 3])
        opened.close()
        // NV indices are defined by the owner too (the device's counters).
        let tpm = try TPMConnection(right)
        defer { tpm.close() }
        try tpm.defineNVIndex(0x0154_4AF0, kind: .counter, options: .noDictionaryAttack)
        try tpm.incrementNVCounter(0x0154_4AF0)
        try tpm.undefineNVIndex(0x0154_4AF0)
        // The owner password never crosses the bus in clear: the proxy sees HMACs only.
        let proxy = try RecordingTPMProxy.start(forwardingTo: store.simulator.port)
        defer { proxy.stop() }
        let recorded = TPMConfiguration(
            tcti: proxy.tcti, ownerAuthorization: SecretBytes(copying: Array(Self.ownerPassword.utf8)))
        _ = try ItemStore.open(at: store.directory + "/recorded", tpm: recorded)
        #expect(proxy.commandCodes.contains(0x131), "CreatePrimary was not sent")
        #expect(!proxy.recordedBytes().containsSubsequence(Array(Self.ownerPassword.utf8)))
    }

    @Test(
        "a store that would get its rollback counter without the owner password fails to open, saying so, rather than open unprotected; with the password it gets its counter"
    )
    func counterWithoutTheOwnerPasswordFailsClosed() throws {
        let copy = NSTemporaryDirectory() + "tpm-keychain-owner-counter-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: copy) }
        // A format-2 store from before rollback protection, with the swtpm state it is sealed to.
        try copyFixtureStore("store-v2", to: copy)
        let simulator = try SoftwareTPM.start(.init(stateDirectory: copy + "/swtpm"))
        defer { simulator.stop() }
        let plain = TPMConfiguration(tcti: simulator.tcti, ownerAuthorization: nil)
        // Opened once while the TPM has no room for a counter: the storage key's context is cached
        // (later opens need no owner authorization for it), and the store stays without a counter.
        let fillers = try NVMemory.fill(tcti: simulator.tcti)
        try ItemStore.open(at: copy, tpm: plain, create: false).close()
        #expect(FileManager.default.fileExists(atPath: copy + "/" + StorageKeyContextFile.name))
        let unprotected = try bytes(of: copy + "/store.meta")
        #expect(try StoreMetadata.parse(unprotected, path: "store.meta").metadata.rollbackCounter == nil)
        try NVMemory.release(fillers, tcti: simulator.tcti)

        let changed = try TPM2Tools.run(["tpm2_changeauth", "-c", "owner", Self.ownerPassword], tcti: simulator.tcti)
        #expect(changed.status == 0, "\(changed.errorOutput)")
        do {
            try ItemStore.open(at: copy, tpm: plain, create: false).close()
            Issue.record("the store opened without its rollback counter although the TPM had room for one")
        } catch {
            #expect(
                error.code == .authenticationFailed && error.message.contains("TPM_KEYCHAIN_OWNER_AUTH"), "\(error)")
        }
        #expect(try bytes(of: copy + "/store.meta") == unprotected)

        let owner = TPMConfiguration(
            tcti: simulator.tcti, ownerAuthorization: SecretBytes(copying: Array(Self.ownerPassword.utf8)))
        let opened = try ItemStore.open(at: copy, tpm: owner, create: false)
        defer { opened.close() }
        #expect(opened.rollbackCounterIndex != nil)
        #expect(try opened.listAll().count == 3)
    }

    static func failedAuthorizations(_ store: TestStore) throws -> UInt32 {
        let tpm = try TPMConnection(TPMConfiguration(tcti: store.simulator.tcti))
        defer { tpm.close() }
        return try tpm.dictionaryAttackStatus().failedAuthorizations
    }
}

import Foundation
import SystemCalls
import TPM
import TPMKeychain
import TPMKeychainTesting
import Testing

@testable import KeychainStore

#if canImport(Glibc)
import Glibc
#endif

/// A persistent simulated TPM that a test can kill without a TPM2_Shutdown, as a power cut, a
/// SIGKILL or a service manager's SIGTERM would, and start again on the same state.
final class KillableTPM: @unchecked Sendable {
    let stateDirectory: String
    private(set) var simulator: SoftwareTPM

    init(stateDirectory: String) throws {
        self.stateDirectory = stateDirectory
        simulator = try SoftwareTPM.start(.init(stateDirectory: stateDirectory))
    }

    /// SIGKILL, then a new swtpm on the same state: an unorderly shutdown.
    func killAndRestart() throws {
        #expect(kill(simulator.processID, SIGKILL) == 0)
        simulator.stop()
        simulator = try SoftwareTPM.start(.init(stateDirectory: stateDirectory))
    }

    func dictionaryAttackStatus() throws -> TPMDictionaryAttackStatus {
        let tpm = try TPMConnection(TPMConfiguration(tcti: simulator.tcti))
        defer { tpm.close() }
        return try tpm.dictionaryAttackStatus()
    }

    deinit { simulator.stop() }
}

/// The sealed master key as store.meta holds it.
func sealedMasterKey(of store: String) throws -> SealedObject {
    let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: store + "/store.meta")))
    return try StoreMetadata.parse(bytes, path: store).metadata.sealedMasterKey
}

@Suite("availability: lockout, hangs and stuck locks")
struct AvailabilityTests {
    @Test("ten unclean TPM stops between reads never lock the store out: the master key is noDA")
    func uncleanStopsDoNotLockOut() throws {
        let directory = NSTemporaryDirectory() + "tpm-keychain-unclean-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try FileManager.default.createDirectory(
            atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let tpm = try KillableTPM(stateDirectory: directory + "/swtpm")
        let store = directory + "/store"
        let location = { () throws -> KeychainLocation in try KeychainLocation(path: store, tcti: tpm.simulator.tcti) }
        try Keychain(service: "svc", location: try location()).set("survives", forKey: "token")
        #expect(try sealedMasterKey(of: store).isDictionaryAttackProtected == false)

        for round in 1...10 {
            Keychain.closeStore(try location())
            try tpm.killAndRestart()
            // Each read unseals the master key again on a TPM that was not shut down in order.
            #expect(
                try Keychain(service: "svc", location: try location()).string(forKey: "token") == "survives",
                "round \(round)")
        }
        Keychain.closeStore(try location())
        let status = try tpm.dictionaryAttackStatus()
        #expect(status.failedAuthorizations == 0)
        #expect(!status.inLockout)
    }

    @Test(
        "a store whose master key an older version sealed with DA protection is resealed noDA when it opens, and then survives unclean stops"
    )
    func olderStoresAreResealed() throws {
        let copy = NSTemporaryDirectory() + "tpm-keychain-reseal-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: copy) }
        try copyVersionOneFixture(to: copy)
        #expect(try sealedMasterKey(of: copy).isDictionaryAttackProtected, "the fixture predates noDA")
        let metadataBefore = try Data(contentsOf: URL(fileURLWithPath: copy + "/store.meta"))

        let tpm = try KillableTPM(stateDirectory: copy + "/swtpm")
        let location = { () throws -> KeychainLocation in try KeychainLocation(path: copy, tcti: tpm.simulator.tcti) }
        let expected = try ProjectFixtures.load("store-v1/expected.json", as: ExpectedStore.self).items[0]
        #expect(
            try Keychain(service: expected.service, location: try location()).string(forKey: expected.account)
                == expected.password)
        #expect(try sealedMasterKey(of: copy).isDictionaryAttackProtected == false)
        #expect(try Data(contentsOf: URL(fileURLWithPath: copy + "/store.meta")) != metadataBefore)
        #expect(try mode(of: copy + "/store.meta") == 0o600)

        for round in 1...10 {
            Keychain.closeStore(try location())
            try tpm.killAndRestart()
            #expect(
                try Keychain(service: expected.service, location: try location()).string(forKey: expected.account)
                    == expected.password,
                "round \(round)")
        }
        Keychain.closeStore(try location())
        // The one unseal of the old DA-protected key marks that TPM session, so the first unclean
        // stop after it counts one failure; none of the nine after the reseal count anything.
        let status = try tpm.dictionaryAttackStatus()
        #expect(status.failedAuthorizations == 1)
        #expect(!status.inLockout)
    }

    @Test("a TPM that stops answering fails the open within the timeout with an error naming it, and nothing hangs")
    func stoppedTPMTimesOut() throws {
        let store = try TestStore()
        try store.keychain().set("value", forKey: "key")
        Keychain.closeStore(store.location)
        #expect(kill(store.simulator.processID, SIGSTOP) == 0)
        defer { kill(store.simulator.processID, SIGCONT) }

        let configuration = TPMConfiguration(tcti: store.simulator.tcti, timeout: .seconds(2))
        let started = ContinuousClock.now
        do {
            _ = try ItemStore.open(at: store.location.path, tpm: configuration, create: false)
            Issue.record("a stopped TPM unsealed a key")
        } catch {
            #expect(error.code == .timedOut, "\(error)")
            #expect(error.description.contains("did not answer within"), "\(error)")
            #expect(error.description.contains(store.simulator.tcti), "\(error)")
        }
        let elapsed = ContinuousClock.now - started
        #expect(elapsed < .seconds(15), "took \(elapsed)")

        // Once it answers again, the store opens: nothing was damaged by the abandoned command.
        kill(store.simulator.processID, SIGCONT)
        #expect(try store.keychain().string(forKey: "key") == "value")
    }

    @Test("a writer waits at most the lock timeout for a stuck holder of the service lock, and the error names it")
    func stuckServiceLockTimesOut() throws {
        let store = try TestStore()
        try store.keychain().set("first", forKey: "key")
        let serviceLock = try #require(
            try FileManager.default.subpathsOfDirectory(atPath: store.location.path + "/items2")
                .first { $0.hasSuffix("/.lock") })
        let holder = open(store.location.path + "/items2/" + serviceLock, O_RDWR | O_CLOEXEC)
        #expect(holder >= 0)
        defer { close(holder) }
        #expect(flock(holder, LOCK_EX) == 0)

        let opened = try ItemStore.open(
            at: store.location.path, tpm: TPMConfiguration(tcti: store.simulator.tcti, timeout: .seconds(1)))
        defer { opened.close() }
        let started = ContinuousClock.now
        do {
            try opened.write(
                try ItemIdentity(accessGroup: "", service: "com.example.tests", account: "key"), mode: .upsert,
                value: ItemValue(kind: .string, bytes: Array("second".utf8)), changes: AttributeChanges())
            Issue.record("wrote while another process held the service lock")
        } catch {
            #expect(error.code == .timedOut, "\(error)")
            #expect(error.message.contains("process \(getpid())"), "\(error)")
            #expect(error.message.contains(".lock"), "\(error)")
        }
        #expect(ContinuousClock.now - started < .seconds(10))
        #expect(try store.keychain().string(forKey: "key") == "first")
    }
}

/// Copies Fixtures/store-v1/store with the modes git does not keep.
func copyVersionOneFixture(to copy: String) throws {
    try copyFixtureStore("store-v1", to: copy)
}

/// Copies Fixtures/<name>/store with the modes git does not keep.
func copyFixtureStore(_ name: String, to copy: String) throws {
    let source = ProjectFixtures.directory.appendingPathComponent(name + "/store").path
    try FileManager.default.copyItem(atPath: source, toPath: copy)
    for case let relative as String in FileManager.default.enumerator(atPath: copy)! {
        var isDirectory: ObjCBool = false
        _ = FileManager.default.fileExists(atPath: copy + "/" + relative, isDirectory: &isDirectory)
        try FileManager.default.setAttributes(
            [.posixPermissions: isDirectory.boolValue ? 0o700 : 0o600],
            ofItemAtPath: copy + "/" + relative)
    }
    try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: copy)
}

@Suite("availability: one store's TPM cannot stall another store")
struct StoreIsolationTests {
    @Test("while one store's first open waits on a stopped TPM, gets on another open store go on")
    func hungTPMDoesNotDelayOtherStores() throws {
        let healthy = try TestStore()
        try healthy.keychain().set("fine", forKey: "key")
        let stalled = try TestStore()
        try stalled.keychain().set("later", forKey: "key")
        Keychain.closeStore(stalled.location)
        #expect(kill(stalled.simulator.processID, SIGSTOP) == 0)
        defer { kill(stalled.simulator.processID, SIGCONT) }

        // The stalled open blocks in a TPM read: on a thread of its own, never on the test
        // runner's cooperative pool, which it would starve (2 threads on 2 cores).
        let stalledKeychain = try stalled.keychain()
        let outcome = Locked<String?>(nil)
        let finished = DispatchSemaphore(value: 0)
        let opener = Thread {
            do throws(KeychainError) {
                _ = try stalledKeychain.string(forKey: "key")
                outcome.withLock { $0 = "opened" }
            } catch {
                outcome.withLock { $0 = "\(error.code)" }
            }
            finished.signal()
        }
        opener.start()
        usleep(300_000) // the open is now waiting for the TPM
        let started = ContinuousClock.now
        for _ in 0..<100 {
            #expect(try healthy.keychain().string(forKey: "key") == "fine")
        }
        #expect(ContinuousClock.now - started < .seconds(2), "gets on the healthy store waited")
        #expect(outcome.withLock { $0 } == nil, "the stalled open did not wait for its TPM")
        // Let the stalled open finish (it would time out after TPM_KEYCHAIN_TIMEOUT otherwise).
        kill(stalled.simulator.processID, SIGCONT)
        finished.wait()
        #expect(outcome.withLock { $0 } == "opened")
    }
}

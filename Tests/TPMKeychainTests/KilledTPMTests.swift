import Foundation
import KeychainStore
import Synchronization
import SystemCalls
import TPM
import TPMKeychain
import TPMKeychainTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// swtpm killed (SIGKILL, no TPM2_Shutdown) while the keychain uses it: during opens, adds,
/// gets and a key rotation. Every operation ends within a bound with a clear error or its result;
/// nothing stored is lost; a TPM restarted from the same state serves the store as before.
@Suite struct KilledTPMTests {
    static let passcode = SecretBytes(copying: Array("killed tpm passcode".utf8))

    /// A persistent simulated TPM (its state in `stateDirectory`) and a store on it.
    final class Fixture: @unchecked Sendable {
        let directory = NSTemporaryDirectory() + "tpm-keychain-killed-" + UUID().uuidString
        var stateDirectory: String { directory + "/tpm-state" }
        var simulator: SoftwareTPM

        init() throws {
            try FileManager.default.createDirectory(
                atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            simulator = try SoftwareTPM.start(.init(stateDirectory: directory + "/tpm-state"))
        }

        /// The store as a process would name it: its path, this TPM, the device beside it.
        func location() throws -> KeychainLocation {
            var location = try KeychainLocation(path: directory + "/store", tcti: simulator.tcti)
            location.deviceDirectory = directory + "/device"
            return location
        }

        func restart() throws {
            simulator.stop()
            simulator = try SoftwareTPM.start(.init(stateDirectory: stateDirectory))
        }

        deinit {
            simulator.stop()
            try? FileManager.default.removeItem(atPath: directory)
        }
    }

    @Test(
        "killed between operations: an open fails fast with tpmUnavailable, an open store keeps reading and writing plain items, protected ones and rotation fail cleanly, and a restart brings everything back"
    )
    func killedBetweenOperations() async throws {
        let fixture = try Fixture()
        let location = try fixture.location()
        try KeychainDevice(location: location).setPasscode(Self.passcode)
        let keychain = try Keychain(service: "svc", location: location)
        for index in 0..<10 { try keychain.set("value-\(index)", forKey: "key-\(index)") }
        try await keychain.set(
            "guarded", forKey: "pin", accessControl: try AccessControl(.afterFirstUnlock, flags: .devicePasscode))
        let metadata = try bytes(of: location.path + "/store.meta")

        #expect(kill(fixture.simulator.processID, SIGKILL) == 0)
        let clock = ContinuousClock()
        // The open store needs no TPM for plain items: reads and writes go on.
        #expect(try keychain.string(forKey: "key-3") == "value-3")
        try keychain.set("written while the TPM was dead", forKey: "late")
        // What needs the TPM fails at once, with the error that says so.
        var started = clock.now
        let context = AuthenticationContext(passcode: .fixed(Self.passcode), location: location)
        await expectAsyncKeychainError(.tpmUnavailable) {
            _ = try await keychain.get("pin", as: String.self, context: context)
        }
        // Adding under a protection whose key record exists needs no TPM (only the record's
        // public key, as on iOS); a protection that needs a new sealed record does.
        try await keychain.set(
            "added while dead", forKey: "pin-2",
            accessControl: try AccessControl(.afterFirstUnlock, flags: .devicePasscode))
        await expectAsyncKeychainError(.tpmUnavailable) {
            try await keychain.set(
                "x", forKey: "face", accessControl: try AccessControl(.whenUnlocked, flags: .biometryAny))
        }
        await expectAsyncKeychainError(.tpmUnavailable) { try await location.rotateKeys(context: context) }
        #expect(try bytes(of: location.path + "/store.meta") == metadata, "a failed rotation changed store.meta")
        Keychain.closeStore(location)
        expectKeychainError(.tpmUnavailable) {
            _ = try Keychain(service: "svc", location: location).string(forKey: "key-3")
        }
        #expect(clock.now - started < .seconds(10), "the failures took \(clock.now - started)")

        // The same TPM state, restarted (a new port): everything is there, the protected item too.
        try fixture.restart()
        let restarted = try fixture.location()
        let again = try Keychain(service: "svc", location: restarted)
        for index in 0..<10 { #expect(try again.string(forKey: "key-\(index)") == "value-\(index)") }
        #expect(try again.string(forKey: "late") == "written while the TPM was dead")
        started = clock.now
        let unlock = AuthenticationContext(passcode: .fixed(Self.passcode), location: restarted)
        // afterFirstUnlock after a TPM restart: the passcode unlocks it again, as after a reboot.
        try KeychainDevice(location: restarted).unlock(passcode: Self.passcode)
        #expect(try await again.get("pin", as: String.self, context: unlock) == "guarded")
        #expect(try await again.get("pin-2", as: String.self, context: unlock) == "added while dead")
        #expect(try again.contains("face") == false)
        try await restarted.rotateKeys(context: unlock)
        #expect(try again.string(forKey: "key-9") == "value-9")
        Keychain.closeStore(restarted)
    }

    @Test(
        "killed at random moments while a process opens the store over and over: each open succeeds or fails with a TPM error within the bound, and after a restart every item reads"
    )
    func killedDuringOpens() throws {
        let fixture = try Fixture()
        let location = try fixture.location()
        let keychain = try Keychain(service: "svc", location: location)
        for index in 0..<20 { try keychain.set("value-\(index)", forKey: "key-\(index)") }
        Keychain.closeStore(location)
        let clock = ContinuousClock()
        for round in 0..<8 {
            let current = try fixture.location()
            let killed = Locked(false)
            let killer = Thread {
                usleep(UInt32.random(in: 0...40_000))
                kill(fixture.simulator.processID, SIGKILL)
                killed.withLock { $0 = true }
            }
            killer.start()
            var opened = 0
            var failed = 0
            // Opens go on until one has started after the kill (however late a loaded machine runs
            // the killer), and for at least 300 ms.
            let started = clock.now
            var attemptsAfterKill = 0
            while clock.now - started < .milliseconds(300) || attemptsAfterKill == 0 {
                if killed.withLock({ $0 }) { attemptsAfterKill += 1 }
                let attempt = clock.now
                do {
                    #expect(
                        try Keychain(service: "svc", location: current).string(forKey: "key-\(round)")
                            == "value-\(round)")
                    opened += 1
                } catch {
                    #expect([.tpmUnavailable, .timedOut].contains(error.code), "round \(round): \(error)")
                    failed += 1
                }
                #expect(clock.now - attempt < .seconds(12), "round \(round): one open took \(clock.now - attempt)")
                Keychain.closeStore(current)
            }
            #expect(failed > 0, "round \(round): the TPM was never seen dead (\(opened) opens)")
            try fixture.restart()
        }
        let restarted = try fixture.location()
        let again = try Keychain(service: "svc", location: restarted)
        for index in 0..<20 { #expect(try again.string(forKey: "key-\(index)") == "value-\(index)") }
        Keychain.closeStore(restarted)
    }
}

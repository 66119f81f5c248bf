import Crypto
import Foundation
import TPM
import TPMKeychain
import TPMKeychainTesting
import Testing

/// The recovery key: a store whose TPM was cleared (a new owner seed) or replaced comes back on
/// the current TPM, keeping what is not bound to the old one.
@Suite struct RecoveryKeyTests {
    static let passcode = SecretBytes(copying: Array("recovery passcode 1".utf8))

    @Test(
        "a recovery.key planted by someone who can write the store's directory (their own public key) stops a rotation before anything is encrypted to it; a real one still follows the rotation"
    )
    func plantedRecoveryKeyIsRefused() async throws {
        let store = try TestStore()
        let keychain = try store.keychain()
        try keychain.set("v", forKey: "k")
        let path = store.location.path + "/recovery.key"
        // The attacker's file: the right magic, their X25519 public key at bytes 32..<64, garbage
        // after, in the layout of either version.
        let attackerKey = Curve25519.KeyAgreement.PrivateKey()
        for (version, size) in [(UInt8(1), 156), (UInt8(2), 188)] {
            var planted = Array("TKRC".utf8) + [0, version, 0, 0] + [UInt8](repeating: 7, count: size - 8)
            planted.replaceSubrange(32..<64, with: attackerKey.publicKey.rawRepresentation)
            #expect(
                FileManager.default.createFile(
                    atPath: path, contents: Data(planted), attributes: [.posixPermissions: 0o600]))
            let metadata = try bytes(of: store.location.path + "/store.meta")
            await #expect(throws: KeychainError.self) { try await store.location.rotateKeys() }
            #expect(try bytes(of: path) == planted, "version \(version)")
            #expect(!FileManager.default.fileExists(atPath: path + ".next"), "version \(version)")
            #expect(try bytes(of: store.location.path + "/store.meta") == metadata, "the rotation went ahead")
            do {
                try await store.location.rotateKeys()
            } catch {
                #expect(error.code == .tampered && error.message.contains("new recovery key"), "\(error)")
            }
        }
        #expect(try keychain.string(forKey: "k") == "v")
        // A real recovery key replaces the planted file and follows the rotation.
        let recoveryKey = try store.location.addRecoveryKey()
        try await store.location.rotateKeys()
        Keychain.closeStore(store.location)
        #expect(try store.location.recover(with: recoveryKey).itemsKept == 1)
    }

    @Test(
        "after a TPM change the store is wrongTPM naming recover; a wrong key is refused; the right one seals it to the new TPM, keeping plain items and removing this-device-only and protected ones"
    )
    func recoverOnAnotherTPM() async throws {
        let store = try TestStore()
        try KeychainDevice(location: store.location).setPasscode(Self.passcode)
        let keychain = try store.keychain()
        try keychain.set("plain value", forKey: "plain", label: "kept")
        try keychain.set("grouped", forKey: "plain-2", accessibility: .afterFirstUnlock)
        try keychain.set("stays here", forKey: "device-only", accessibility: .whenUnlockedThisDeviceOnly)
        try await keychain.set(
            "behind the passcode", forKey: "pin",
            accessControl: try AccessControl(.whenUnlocked, flags: .devicePasscode))
        #expect(!store.location.hasRecoveryKey)
        let recoveryKey = try store.location.addRecoveryKey()
        #expect(store.location.hasRecoveryKey)
        let groups = recoveryKey.text.split(separator: "-")
        #expect(
            groups.count == 8
                && groups.allSatisfy { $0.count == 8 && $0.allSatisfy { "cbdefghijklnrtuv".contains($0) } },
            "\(recoveryKey.text)")
        #expect(!"\(recoveryKey)".contains(String(groups[0])), "the description shows the key")
        // The file holds nothing readable without the key.
        let recoveryFile = try bytes(of: store.location.path + "/recovery.key")
        // A key rotation re-encrypts the new master key for the same recovery key (to its public
        // half, without knowing it): the key written down stays the one to use.
        let context = AuthenticationContext(passcode: .fixed(Self.passcode), location: store.location)
        try await store.location.rotateKeys(context: context)
        #expect(try bytes(of: store.location.path + "/recovery.key") != recoveryFile)
        #expect(!FileManager.default.fileExists(atPath: store.location.path + "/recovery.key.next"))
        #expect(recoveryFile.count == 188) // version 2: 156 bytes and their MAC

        // Another TPM (a motherboard swap, a VM moved without its vTPM state).
        Keychain.closeStore(store.location)
        let replacement = try SoftwareTPM.start()
        defer { replacement.stop() }
        var moved = try KeychainLocation(path: store.location.path, tcti: replacement.tcti)
        moved.deviceDirectory = store.directory + "/device-on-replacement"
        defer { Keychain.closeStore(moved) }
        do {
            _ = try Keychain(service: "com.example.tests", location: moved).string(forKey: "plain")
            Issue.record("a store opened on another TPM")
        } catch {
            #expect(error.code == .wrongTPM, "\(error)")
            #expect(error.message.contains("recovering with it"), "\(error.message)")
        }

        let metadata = try bytes(of: store.location.path + "/store.meta")
        let wrong = try RecoveryKey(text: String(recoveryKey.text.reversed()).replacingOccurrences(of: "-", with: ""))
        expectKeychainError(.authenticationFailed) { try moved.recover(with: wrong) }
        expectKeychainError(.invalidParameter) { _ = try RecoveryKey(text: "not a key") }
        #expect(try bytes(of: store.location.path + "/store.meta") == metadata, "a refused recovery changed store.meta")

        // Typed back in capitals with spaces: the same key.
        let typed = try RecoveryKey(text: recoveryKey.text.uppercased().replacingOccurrences(of: "-", with: " "))
        let report = try moved.recover(with: typed)
        #expect(report.itemsKept == 2 && report.itemsRemoved == 2, "\(report)")
        let recovered = try Keychain(service: "com.example.tests", location: moved)
        #expect(try recovered.string(forKey: "plain") == "plain value")
        #expect(try recovered.attributes(forKey: "plain")?.label == "kept")
        #expect(try recovered.string(forKey: "plain-2") == "grouped")
        #expect(try recovered.string(forKey: "device-only") == nil)
        #expect(try recovered.string(forKey: "pin") == nil)
        try recovered.set("after the recovery", forKey: "new")
        Keychain.closeStore(moved)
        #expect(
            try Keychain(service: "com.example.tests", location: moved).string(forKey: "new") == "after the recovery")
        // The recovery key still works (a second TPM change).
        let again = try moved.recover(with: typed)
        #expect(again.itemsKept == 3 && again.itemsRemoved == 0, "\(again)")
    }

    @Test(
        "a recovery decides what to remove from authenticated headers only: an item whose header was edited to name a key record stops it as tampered, with nothing removed"
    )
    func recoveryAuthenticatesHeaders() throws {
        let store = try TestStore()
        let keychain = try store.keychain()
        try keychain.set("plain value", forKey: "plain")
        try keychain.set("another", forKey: "other")
        let recoveryKey = try store.location.addRecoveryKey()
        Keychain.closeStore(store.location)
        let files = try store.itemFiles()
        #expect(files.count == 2)
        // Bytes 52..<68 name the item's key record: zero for the master key. Edited, the item would
        // look protected, which a recovery removes.
        var edited = try bytes(of: files[0])
        edited[52] ^= 0x01
        try overwrite(files[0], with: edited)
        let replacement = try SoftwareTPM.start()
        defer { replacement.stop() }
        var moved = try KeychainLocation(path: store.location.path, tcti: replacement.tcti)
        moved.deviceDirectory = store.directory + "/device-on-replacement"
        defer { Keychain.closeStore(moved) }
        expectKeychainError(.tampered) { try moved.recover(with: recoveryKey) }
        #expect(try store.itemFiles().count == 2, "a refused recovery removed items")
    }

    @Test("a store without a recovery key cannot be recovered, and says so")
    func noRecoveryKey() throws {
        let store = try TestStore()
        try store.keychain().set("v", forKey: "k")
        Keychain.closeStore(store.location)
        let someKey = try RecoveryKey(text: String(repeating: "cbdefghi", count: 8))
        expectKeychainError(.notAvailable) { try store.location.recover(with: someKey) }
        #expect(try store.keychain().string(forKey: "k") == "v")
    }
}

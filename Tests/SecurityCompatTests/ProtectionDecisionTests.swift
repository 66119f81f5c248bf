import Foundation
import SecurityCompat
import TPM
import TPMKeychain
import TPMKeychainTesting
import Testing

/// `Keychain` and SecItem reach the store through one item service, which alone decides whether
/// an item gets a key record. Before it, the two faces decided apart: SecItem kept an item with a
/// class and no constraint under the master key from the device file alone, while
/// `Keychain.set(_:forKey:accessControl:)` always opened the device (on a simulated store, its
/// swtpm) and left the choice to the engine. This pins what both must do.
/// In SecItemTests' serialized suite: SecItem's configuration is process-wide.
extension SecItemTests {
    private static let group = "TEAMID.com.example.app"

    @Test(
        "Keychain and SecItem protect alike: a class with no constraint stays under the master key without a TPM command; with a passcode, lock-state classes get a key record and `always` does not"
    )
    func bothFacesDecideAlike() async throws {
        let simulator = try SoftwareTPM.start()
        defer { simulator.stop() }
        let proxy = try RecordingTPMProxy.start(forwardingTo: simulator.port)
        defer { proxy.stop() }
        let directory = NSTemporaryDirectory() + "tpm-keychain-faces-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var location = try KeychainLocation(path: directory + "/store", tcti: proxy.tcti)
        location.deviceDirectory = directory + "/device"
        defer { Keychain.closeStore(location) }
        KeychainEnvironment.reset()
        defer { KeychainEnvironment.reset() }
        KeychainEnvironment.location = location
        KeychainEnvironment.accessGroups = [Self.group]
        let keychain = try Keychain(service: "faces", accessGroup: Self.group, location: location)
        try keychain.set("opens the store", forKey: "warm-up")

        // Without a passcode the device counts as always unlocked: no class binds to anything.
        let classes: [(Accessibility, CFString)] = [
            (.whenUnlocked, kSecAttrAccessibleWhenUnlocked),
            (.afterFirstUnlockThisDeviceOnly, kSecAttrAccessibleAfterFirstUnlockThisDeviceOnly),
            (.always, kSecAttrAccessibleAlways),
        ]
        for (accessibility, constant) in classes {
            proxy.reset()
            try await keychain.set("v", forKey: "api-\(accessibility)", accessControl: try AccessControl(accessibility))
            #expect(proxy.commandCount == 0, "Keychain, \(accessibility): \(proxy.commandCodes)")
            #expect(try keychain.accessControl(forKey: "api-\(accessibility)") == nil, "Keychain, \(accessibility)")
            proxy.reset()
            #expect(SecItemAdd(Self.item("secitem-\(accessibility)", constant), nil) == errSecSuccess)
            #expect(proxy.commandCount == 0, "SecItem, \(accessibility): \(proxy.commandCodes)")
            #expect(try keychain.accessControl(forKey: "secitem-\(accessibility)") == nil, "SecItem, \(accessibility)")
        }

        // With a passcode, lock states count: both faces bind whenUnlocked items to a key record.
        try KeychainDevice(location: location).setPasscode(SecretBytes(copying: Array("4711 passcode".utf8)))
        let withPasscode: [(Accessibility, CFString, Bool)] = [
            (.whenUnlocked, kSecAttrAccessibleWhenUnlocked, true),
            (.always, kSecAttrAccessibleAlways, false),
        ]
        for (accessibility, constant, bound) in withPasscode {
            try await keychain.set(
                "v", forKey: "api-passcode-\(accessibility)", accessControl: try AccessControl(accessibility))
            #expect(
                try keychain.accessControl(forKey: "api-passcode-\(accessibility)")
                    == (bound ? try AccessControl(accessibility) : nil))
            #expect(SecItemAdd(Self.item("secitem-passcode-\(accessibility)", constant), nil) == errSecSuccess)
            #expect(
                try keychain.accessControl(forKey: "secitem-passcode-\(accessibility)")
                    == (bound ? try AccessControl(accessibility) : nil))
        }
    }

    private static func item(_ account: String, _ accessible: CFString) -> CFDictionary {
        let attributes: [String: Any] = [
            kSecClass as String: kSecClassGenericPassword, kSecAttrService as String: "faces",
            kSecAttrAccount as String: account, kSecAttrAccessGroup as String: group,
            kSecAttrAccessible as String: accessible, kSecValueData as String: Data("v".utf8),
        ]
        return attributes as CFDictionary
    }
}

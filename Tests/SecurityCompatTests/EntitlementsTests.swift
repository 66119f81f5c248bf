import Foundation
import SecurityCompat
import TPMKeychain
import TPMKeychainTesting
import Testing

/// Ported code configures nothing: its entitlements file gives the access groups, and a missing
/// TPM says why. In SecItemTests' serialized suite: the environment is process-wide.
extension SecItemTests {
    @Test(
        "An Xcode entitlements file gives the access groups, $(AppIdentifierPrefix) expanded; code settings win; a file that cannot be expanded is ignored"
    )
    func entitlementsFile() throws {
        let environment = try CompatEnvironment()
        let file = environment.directory + "/App.entitlements"
        let plist: [String: Any] = [
            "keychain-access-groups": [
                "$(AppIdentifierPrefix)com.example.shared", "$(AppIdentifierPrefix)$(CFBundleIdentifier)",
            ],
            "application-identifier": "$(AppIdentifierPrefix)$(PRODUCT_BUNDLE_IDENTIFIER)",
            "com.apple.developer.team-identifier": "ABCDE12345",
        ]
        try PropertyListSerialization.data(fromPropertyList: plist, format: .xml, options: 0)
            .write(to: URL(fileURLWithPath: file))
        let variables = [
            Entitlements.pathVariable: file, "TPM_KEYCHAIN_TEAM_ID": "ABCDE12345",
            "TPM_KEYCHAIN_BUNDLE_ID": "com.example.app",
        ]
        for (name, value) in variables { setenv(name, value, 1) }
        defer { for name in variables.keys { unsetenv(name) } }
        // As ported code starts: nothing configured but the store.
        KeychainEnvironment.reset()
        KeychainEnvironment.location = environment.location
        #expect(KeychainEnvironment.accessGroups == ["ABCDE12345.com.example.shared", "ABCDE12345.com.example.app"])
        #expect(KeychainEnvironment.applicationIdentifier == "ABCDE12345.com.example.app")

        let item: [String: Any] = [
            kSecClass as String: kSecClassGenericPassword, kSecAttrService as String: "entitled",
            kSecAttrAccount as String: "ada", kSecValueData as String: Data("v".utf8),
        ]
        #expect(SecItemAdd(item as CFDictionary, nil) == errSecSuccess)
        var result: AnyObject?
        #expect(
            SecItemCopyMatching(
                [
                    kSecClass as String: kSecClassGenericPassword, kSecAttrService as String: "entitled",
                    kSecReturnAttributes as String: true,
                ] as CFDictionary, &result) == errSecSuccess)
        #expect(
            (result as? [String: Any])?[kSecAttrAccessGroup as String] as? String == "ABCDE12345.com.example.shared")
        var other = item
        other[kSecAttrAccessGroup as String] = "OTHER.com.example.shared"
        #expect(SecItemAdd(other as CFDictionary, nil) == errSecMissingEntitlement)
        var second = item
        second[kSecAttrAccessGroup as String] = "ABCDE12345.com.example.app"
        #expect(SecItemAdd(second as CFDictionary, nil) == errSecSuccess)

        // Code settings win.
        KeychainEnvironment.accessGroups = ["CODE.group"]
        #expect(KeychainEnvironment.accessGroups == ["CODE.group"])

        // Without a team identifier the prefix cannot be expanded: the file is ignored.
        unsetenv("TPM_KEYCHAIN_TEAM_ID")
        KeychainEnvironment.reset()
        #expect(KeychainEnvironment.entitlements == nil)
        #expect(KeychainEnvironment.accessGroups == ["com.example.app"])
        KeychainEnvironment.teamIdentifier = "FGHIJ67890"
        #expect(KeychainEnvironment.accessGroups.first == "FGHIJ67890.com.example.shared")
    }

    @Test(
        "A SecItem call without a TPM answers errSecNotAvailable and leaves the reason findable; one line gives a test a simulated TPM"
    )
    func unavailableAndSimulated() throws {
        let directory = NSTemporaryDirectory() + "tpm-keychain-unavailable-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        KeychainEnvironment.reset()
        defer { KeychainEnvironment.reset() }
        // A TCTI nobody listens on: port 1 on loopback.
        KeychainEnvironment.location = try KeychainLocation(
            path: directory + "/nowhere", tcti: "swtpm:host=127.0.0.1,port=1")
        let item: [String: Any] = [
            kSecClass as String: kSecClassGenericPassword, kSecAttrService as String: "s",
            kSecAttrAccount as String: "a",
            kSecValueData as String: Data("v".utf8),
        ]
        #expect(SecItemAdd(item as CFDictionary, nil) == errSecNotAvailable)
        let reason = try #require(KeychainEnvironment.lastUnavailableReason)
        #expect(reason.contains("127.0.0.1") || reason.lowercased().contains("tpm"), "\(reason)")

        let location = try KeychainEnvironment.useSimulatedTPM(directory: directory + "/simulated")
        defer { Keychain.closeStore(location) }
        #expect(SecItemAdd(item as CFDictionary, nil) == errSecSuccess)
        var result: AnyObject?
        #expect(
            SecItemCopyMatching(
                [
                    kSecClass as String: kSecClassGenericPassword, kSecAttrService as String: "s",
                    kSecReturnData as String: true,
                ] as CFDictionary, &result) == errSecSuccess)
        #expect(result as? Data == Data("v".utf8))
    }
}

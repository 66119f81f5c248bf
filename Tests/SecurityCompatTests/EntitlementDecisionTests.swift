import Foundation
import SecurityCompat
import TPMKeychain
import Testing

/// SecItem as a caller of the one decision point: every entry point that names an access group
/// the process is not entitled to is refused with errSecMissingEntitlement and changes nothing.
/// In SecItemTests' serialized suite: the environment is process-wide.
extension SecItemTests {
    /// Each SecItem entry point, naming `group`; its status.
    static let entryPoints: [(name: String, call: @Sendable (String) -> OSStatus)] = [
        ("SecItemAdd", { group in SecItemAdd(item(group) as CFDictionary, nil) }),
        (
            "SecItemCopyMatching",
            { group in
                var result: AnyObject?
                return SecItemCopyMatching(
                    query(group).merging([kSecReturnData as String: true]) { $1 } as CFDictionary, &result)
            }
        ),
        (
            "SecItemUpdate, the query's group",
            { group in
                SecItemUpdate(
                    query(group) as CFDictionary, [kSecValueData as String: Data("changed".utf8)] as CFDictionary)
            }
        ),
        (
            "SecItemUpdate, moving into the group",
            { group in
                SecItemUpdate(
                    query(nil) as CFDictionary, [kSecAttrAccessGroup as String: group] as CFDictionary)
            }
        ),
        ("SecItemDelete", { group in SecItemDelete(query(group) as CFDictionary) }),
        (
            "SecKeyCreateRandomKey, a permanent key",
            { group in
                let parameters: [String: Any] = [
                    kSecAttrKeyType as String: kSecAttrKeyTypeECSECPrimeRandom, kSecAttrKeySizeInBits as String: 256,
                    kSecAttrAccessGroup as String: group, kSecAttrIsPermanent as String: true,
                ]
                var error: Unmanaged<CFError>?
                guard SecKeyCreateRandomKey(parameters as CFDictionary, &error) == nil else { return errSecSuccess }
                return OSStatus(CFErrorGetCode(error!.takeRetainedValue()))
            }
        ),
    ]

    static func item(_ group: String?) -> [String: Any] {
        query(group).merging([kSecValueData as String: Data("value".utf8)]) { $1 }
    }

    static func query(_ group: String?) -> [String: Any] {
        var query: [String: Any] = [
            kSecClass as String: kSecClassGenericPassword, kSecAttrService as String: "decision",
            kSecAttrAccount as String: "ada",
        ]
        if let group { query[kSecAttrAccessGroup as String] = group }
        return query
    }

    @Test(
        "every SecItem entry point naming a group the app is not entitled to: errSecMissingEntitlement, nothing changed"
    )
    func everyEntryPointAsksTheDecisionPoint() throws {
        let environment = try CompatEnvironment()
        defer { withExtendedLifetime(environment) {} }
        #expect(SecItemAdd(Self.item(nil) as CFDictionary, nil) == errSecSuccess)
        for entry in Self.entryPoints {
            #expect(entry.call("OTHER.com.bank.app") == errSecMissingEntitlement, "\(entry.name)")
        }
        // The entitled item is as it was, in the app's first group.
        var result: AnyObject?
        let status = SecItemCopyMatching(
            Self.query(nil).merging([kSecReturnAttributes as String: true, kSecReturnData as String: true]) { $1 }
                as CFDictionary, &result)
        #expect(status == errSecSuccess)
        let found = result as? [String: Any]
        #expect(found?[kSecValueData as String] as? Data == Data("value".utf8))
        #expect(found?[kSecAttrAccessGroup as String] as? String == "TEAMID.com.example.app")
        // And each entry point works in an entitled group (the refusal above is the group's).
        for entry in Self.entryPoints where entry.name != "SecItemAdd" {
            let status = entry.call("TEAMID.com.example.shared")
            #expect(status != errSecMissingEntitlement, "\(entry.name): \(status)")
        }
    }
}

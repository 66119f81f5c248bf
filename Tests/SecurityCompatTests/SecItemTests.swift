import Foundation
import KeychainEnvironmentTurns
import LocalAuthenticationCompat
import SecurityCompat
import SystemCalls
import TPM
import TPMKeychain
import TPMKeychainTesting
import Testing

/// SecItem and LAContext on swtpm. Serialized: SecItem's configuration is process-wide.
@Suite(.serialized, .keychainEnvironment, .tags(.concurrency)) struct SecItemTests {
    // MARK: Code in the seeds' style

    @Test("session storage: add, update on duplicate, load into AnyObject?, exists without data, delete")
    func sessionStorage() throws {
        let environment = try CompatEnvironment()
        let storage = SessionStorage(service: "com.example.privacyboost")
        try storage.save(Data("jwt-1".utf8), for: "session")
        try storage.save(Data("jwt-2".utf8), for: "session") // errSecDuplicateItem, then SecItemUpdate
        #expect(try storage.load("session") == Data("jwt-2".utf8))
        #expect(storage.exists("session"))
        try storage.delete("session")
        #expect(!storage.exists("session"))
        #expect(throws: SessionStorageError.notFound) { try storage.load("session") }
        try storage.delete("session") // errSecItemNotFound is fine
        _ = environment
    }

    @Test("token helper: [CFString: Any] queries, delete-then-add, CFTypeRef? results, logout clears the service")
    func tokenHelper() throws {
        let environment = try CompatEnvironment()
        let helper = TokenHelper()
        #expect(helper.save("access-1", account: "access"))
        #expect(helper.save("refresh-1", account: "refresh"))
        #expect(helper.save("access-2", account: "access"))
        #expect(helper.read(account: "access") == "access-2")
        #expect(helper.read(account: "refresh") == "refresh-1")
        #expect(helper.logout() == errSecSuccess)
        #expect(helper.read(account: "access") == nil && helper.read(account: "refresh") == nil)
        #expect(helper.logout() == errSecItemNotFound)
        _ = environment
    }

    @Test("typed wrapper: Codable values, an access group, a result dictionary with kSecValueData")
    func typedWrapper() throws {
        let environment = try CompatEnvironment()
        struct Profile: Codable, Equatable {
            var name: String
            var age: Int
        }
        let shared = TypedKeychain(service: "com.example.wrapper", accessGroup: "TEAMID.com.example.shared")
        try shared.set(Profile(name: "Ada", age: 36), for: "profile")
        try shared.set(Profile(name: "Ada", age: 37), for: "profile")
        #expect(try shared.get("profile", as: Profile.self) == Profile(name: "Ada", age: 37))
        // Without a group, a query sees every group of the process.
        #expect(
            try TypedKeychain(service: "com.example.wrapper", accessGroup: nil).get("profile", as: Profile.self)?.age
                == 37)
        // A group the process is not entitled to is refused as iOS refuses it.
        #expect(throws: SessionStorageError.unexpectedStatus(errSecMissingEntitlement)) {
            try TypedKeychain(service: "com.example.wrapper", accessGroup: "OTHER.group").set(1, for: "x")
        }
        _ = environment
    }

    @Test("biometry-protected save and a load from a background queue; invalidated after an enrollment change")
    func biometricStorage() async throws {
        let environment = try CompatEnvironment()
        let storage = BiometricSessionStorage()
        try storage.save(Data("session-key".utf8), key: "session")
        #expect(try await storage.load(key: "session", reason: "unlock your session") == Data("session-key".utf8))
        #expect(environment.face.attempts == 1)
        environment.face.nextOutcomes = [.cancel]
        await #expect(throws: BiometricSessionStorage.Failure.status(errSecUserCanceled)) {
            _ = try await storage.load(key: "session", reason: "unlock your session")
        }
        environment.face.reenroll()
        // iOS: the item can never be decrypted again, is deleted, and reads as not found.
        await #expect(throws: BiometricSessionStorage.Failure.status(errSecItemNotFound)) {
            _ = try await storage.load(key: "session", reason: "unlock your session")
        }
        await #expect(throws: BiometricSessionStorage.Failure.status(errSecItemNotFound)) {
            _ = try await storage.load(key: "session", reason: "unlock your session")
        }
    }

    @Test(
        "biometric auth: canEvaluatePolicy, biometryType, evaluate, and a stored domain state that detects enrollment changes"
    )
    func biometricAuth() async throws {
        let environment = try CompatEnvironment()
        let auth = BiometricAuth()
        #expect(auth.availableKind() == .faceID)
        #expect(await auth.authenticate(reason: "sign in") == nil)
        environment.face.nextOutcomes = [.noMatch]
        #expect(await auth.authenticate(reason: "sign in") == .authenticationFailed)
        environment.face.nextOutcomes = [.cancel]
        #expect(await auth.authenticate(reason: "sign in") == .userCancel)
        auth.rememberEnrollment()
        #expect(!auth.enrollmentChanged())
        environment.face.enroll("second face")
        #expect(auth.enrollmentChanged())
        environment.face.unenroll()
        #expect(auth.availableKind() == .none)
        var error: NSError?
        #expect(!LAContext().canEvaluatePolicy(.deviceOwnerAuthenticationWithBiometrics, error: &error))
        #expect(error?.domain == LAErrorDomain && error?.code == LAError.Code.biometryNotEnrolled.rawValue)
    }

    @Test("the domain state differs between applications and is nil without enrollment")
    func domainStatePerApplication() throws {
        let environment = try CompatEnvironment(passcode: nil)
        let first = LAContext()
        var error: NSError?
        #expect(first.canEvaluatePolicy(.deviceOwnerAuthenticationWithBiometrics, error: &error))
        KeychainEnvironment.applicationIdentifier = "com.example.other"
        let other = LAContext()
        #expect(other.canEvaluatePolicy(.deviceOwnerAuthenticationWithBiometrics, error: &error))
        #expect(
            first.evaluatedPolicyDomainState != nil
                && first.evaluatedPolicyDomainState != other.evaluatedPolicyDomainState)
        #expect(other.domainState.biometry.stateHash == other.evaluatedPolicyDomainState)
        environment.face.unenroll()
        #expect(LAContext().domainState.biometry.stateHash == nil)
    }

    // MARK: Semantics

    @Test("primary keys: a duplicate add fails, an item differing in a non-primary attribute still collides")
    func primaryKeys() throws {
        let environment = try CompatEnvironment()
        let base: [String: Any] = [
            kSecClass as String: kSecClassGenericPassword, kSecAttrService as String: "svc",
            kSecAttrAccount as String: "a",
            kSecValueData as String: Data("1".utf8),
        ]
        #expect(SecItemAdd(base as CFDictionary, nil) == errSecSuccess)
        #expect(SecItemAdd(base as CFDictionary, nil) == errSecDuplicateItem)
        var labelled = base
        labelled[kSecAttrLabel as String] = "other label"
        labelled[kSecAttrGeneric as String] = Data([1])
        #expect(SecItemAdd(labelled as CFDictionary, nil) == errSecDuplicateItem)
        // Synchronizable is part of the primary key: a sync item with the same names coexists.
        var synced = base
        synced[kSecAttrSynchronizable as String] = kCFBooleanTrue
        #expect(SecItemAdd(synced as CFDictionary, nil) == errSecSuccess)
        // Absent or false sync sees only the non-sync item, true only the sync one, syna both.
        func count(_ sync: Any?) -> Int {
            var query: [String: Any] = [
                kSecClass as String: kSecClassGenericPassword, kSecAttrService as String: "svc",
                kSecMatchLimit as String: kSecMatchLimitAll, kSecReturnAttributes as String: true,
            ]
            if let sync { query[kSecAttrSynchronizable as String] = sync }
            var result: AnyObject?
            guard SecItemCopyMatching(query as CFDictionary, &result) == errSecSuccess else { return 0 }
            return (result as? [[String: Any]])?.count ?? -1
        }
        #expect(count(nil) == 1 && count(false) == 1 && count(true) == 1 && count(kSecAttrSynchronizableAny) == 2)
        _ = environment
    }

    @Test(
        "result shapes: data, persistent reference, attributes, arrays in insertion order; nothing without return keys")
    func resultShapes() throws {
        let environment = try CompatEnvironment()
        for (index, account) in ["one", "two", "three"].enumerated() {
            let item: [String: Any] = [
                kSecClass as String: kSecClassGenericPassword, kSecAttrService as String: "shapes",
                kSecAttrAccount as String: account, kSecValueData as String: Data([UInt8(index)]),
                kSecAttrLabel as String: "label \(account)", kSecAttrCreator as String: 8443,
            ]
            #expect(SecItemAdd(item as CFDictionary, nil) == errSecSuccess)
        }
        let base: [String: Any] = [kSecClass as String: kSecClassGenericPassword, kSecAttrService as String: "shapes"]
        func copy(_ extra: [String: Any]) -> (OSStatus, AnyObject?) {
            var result: AnyObject?
            let status = SecItemCopyMatching(base.merging(extra) { $1 } as CFDictionary, &result)
            return (status, result)
        }
        // Default limit one: the first added.
        #expect(copy([kSecReturnData as String: true]).1 as? Data == Data([0]))
        let (_, reference) = copy([kSecAttrAccount as String: "two", kSecReturnPersistentRef as String: true])
        let persistent = try #require(reference as? Data)
        // A persistent reference finds the item without a class.
        var byReference: AnyObject?
        #expect(
            SecItemCopyMatching(
                [kSecValuePersistentRef as String: persistent, kSecReturnData as String: true] as CFDictionary,
                &byReference) == errSecSuccess)
        #expect(byReference as? Data == Data([1]))
        let (_, attributes) = copy([
            kSecAttrAccount as String: "three", kSecReturnAttributes as String: true, kSecReturnData as String: true,
        ])
        let dictionary = try #require(attributes as? [String: Any])
        #expect(dictionary[kSecAttrAccount as String] as? String == "three")
        #expect(dictionary[kSecAttrLabel as String] as? String == "label three")
        #expect((dictionary[kSecAttrCreator as String] as? NSNumber)?.intValue == 8443)
        #expect(dictionary[kSecValueData as String] as? Data == Data([2]))
        #expect(dictionary[kSecClass as String] as? String == "genp")
        #expect(dictionary[kSecAttrAccessible as String] as? String == "ak")
        #expect(dictionary[kSecAttrAccessGroup as String] as? String == "TEAMID.com.example.app")
        #expect(dictionary[kSecAttrCreationDate as String] is Date)
        let (_, all) = copy([kSecMatchLimit as String: kSecMatchLimitAll, kSecReturnAttributes as String: true])
        #expect(
            (all as? [[String: Any]])?.compactMap { $0[kSecAttrAccount as String] as? String } == [
                "one", "two", "three",
            ])
        let (status, nothing) = copy([:])
        #expect(status == errSecSuccess && nothing == nil)
        #expect(copy([kSecAttrAccount as String: "four"]).0 == errSecItemNotFound)
        _ = environment
    }

    @Test("values come back with the types stored: an account as Data, numbers as NSNumber, booleans")
    func typesRoundTrip() throws {
        let environment = try CompatEnvironment()
        let account = Data([0x00, 0xFF, 0x10])
        let item: [String: Any] = [
            kSecClass as String: kSecClassGenericPassword, kSecAttrService as String: "types",
            kSecAttrAccount as String: account,
            kSecAttrGeneric as String: account, kSecAttrCreator as String: UInt(0x4142_4344),
            kSecAttrIsInvisible as String: true,
            kSecValueData as String: Data(),
        ]
        #expect(SecItemAdd(item as CFDictionary, nil) == errSecSuccess)
        var result: AnyObject?
        #expect(
            SecItemCopyMatching(
                [
                    kSecClass as String: kSecClassGenericPassword, kSecAttrAccount as String: account,
                    kSecReturnAttributes as String: true, kSecReturnData as String: true,
                ] as CFDictionary, &result) == errSecSuccess)
        let dictionary = try #require(result as? [String: Any])
        #expect(dictionary[kSecAttrAccount as String] as? Data == account)
        #expect(dictionary[kSecAttrGeneric as String] as? Data == account)
        #expect((dictionary[kSecAttrCreator as String] as? NSNumber)?.uintValue == 0x4142_4344)
        #expect(dictionary[kSecAttrIsInvisible as String] as? Bool == true)
        #expect(dictionary[kSecAttrIsNegative as String] == nil)
        #expect(dictionary[kSecValueData as String] as? Data == Data())
        _ = environment
    }

    @Test(
        "update and delete act on every match, kSecMatchLimitAll is accepted on delete, return keys in an update query are errSecParam"
    )
    func updateAndDelete() throws {
        let environment = try CompatEnvironment()
        for account in ["a", "b"] {
            #expect(
                SecItemAdd(
                    [
                        kSecClass as String: kSecClassGenericPassword, kSecAttrService as String: "bulk",
                        kSecAttrAccount as String: account,
                        kSecValueData as String: Data("old".utf8),
                    ] as CFDictionary, nil) == errSecSuccess)
        }
        let query: [String: Any] = [kSecClass as String: kSecClassGenericPassword, kSecAttrService as String: "bulk"]
        #expect(
            SecItemUpdate(
                query as CFDictionary,
                [kSecValueData as String: Data("new".utf8), kSecAttrLabel as String: "L"] as CFDictionary)
                == errSecSuccess)
        var result: AnyObject?
        #expect(
            SecItemCopyMatching(
                query.merging([
                    kSecMatchLimit as String: kSecMatchLimitAll, kSecReturnData as String: true,
                    kSecReturnAttributes as String: true,
                ]) { $1 } as CFDictionary, &result) == errSecSuccess)
        let items = try #require(result as? [[String: Any]])
        #expect(
            items.count == 2
                && items.allSatisfy {
                    $0[kSecValueData as String] as? Data == Data("new".utf8)
                        && $0[kSecAttrLabel as String] as? String == "L"
                })
        #expect(
            SecItemUpdate(
                query.merging([kSecReturnData as String: true]) { $1 } as CFDictionary,
                [kSecAttrLabel as String: "x"] as CFDictionary) == errSecParam)
        #expect(
            SecItemUpdate(
                [kSecClass as String: kSecClassGenericPassword, kSecAttrService as String: "none"] as CFDictionary,
                [kSecAttrLabel as String: "x"] as CFDictionary) == errSecItemNotFound)
        // Renaming an item moves it (a change of its primary key), and refuses to overwrite another.
        #expect(
            SecItemUpdate(
                query.merging([kSecAttrAccount as String: "a"]) { $1 } as CFDictionary,
                [kSecAttrAccount as String: "b"] as CFDictionary) == errSecDuplicateItem)
        #expect(
            SecItemUpdate(
                query.merging([kSecAttrAccount as String: "a"]) { $1 } as CFDictionary,
                [kSecAttrAccount as String: "c"] as CFDictionary) == errSecSuccess)
        #expect(
            SecItemCopyMatching(
                query.merging([kSecAttrAccount as String: "c", kSecReturnData as String: true]) { $1 } as CFDictionary,
                &result) == errSecSuccess && result as? Data == Data("new".utf8))
        #expect(
            SecItemDelete(query.merging([kSecMatchLimit as String: kSecMatchLimitAll]) { $1 } as CFDictionary)
                == errSecSuccess)
        #expect(SecItemDelete(query as CFDictionary) == errSecItemNotFound)
        _ = environment
    }

    @Test(
        "classes: internet passwords are stored; a certificate that is not one is errSecParam; no class is errSecParam"
    )
    func classes() throws {
        let environment = try CompatEnvironment()
        let internet: [String: Any] = [
            kSecClass as String: kSecClassInternetPassword, kSecAttrServer as String: "example.com",
            kSecAttrProtocol as String: kSecAttrProtocolHTTPS, kSecAttrPort as String: 443,
            kSecAttrAccount as String: "ada", kSecValueData as String: Data("pw".utf8),
        ]
        #expect(SecItemAdd(internet as CFDictionary, nil) == errSecSuccess)
        #expect(SecItemAdd(internet as CFDictionary, nil) == errSecDuplicateItem)
        var result: AnyObject?
        #expect(
            SecItemCopyMatching(
                [
                    kSecClass as String: kSecClassInternetPassword, kSecAttrServer as String: "example.com",
                    kSecReturnAttributes as String: true,
                ] as CFDictionary, &result) == errSecSuccess)
        #expect((result as? [String: Any])?[kSecAttrProtocol as String] as? String == "htps")
        // Certificates and identities are stored (CertificateTests); data that is no certificate is
        // errSecParam, and an empty keychain has no identity.
        for itemClass in [kSecClassCertificate, kSecClassIdentity] {
            #expect(
                SecItemAdd([kSecClass as String: itemClass, kSecValueData as String: Data()] as CFDictionary, nil)
                    == errSecParam)
            #expect(SecItemCopyMatching([kSecClass as String: itemClass] as CFDictionary, nil) == errSecItemNotFound)
        }
        #expect(SecItemAdd([kSecAttrAccount as String: "x"] as CFDictionary, nil) == errSecParam)
        _ = environment
    }

    @Test(
        "authentication UI: fail is errSecInteractionNotAllowed, skip leaves protected items out; a non-interactive context fails without prompting"
    )
    func authenticationUI() throws {
        let environment = try CompatEnvironment()
        var error: Unmanaged<CFError>?
        let control = try #require(
            SecAccessControlCreateWithFlags(nil, kSecAttrAccessibleWhenUnlocked, .userPresence, &error))
        #expect(
            SecItemAdd(
                [
                    kSecClass as String: kSecClassGenericPassword, kSecAttrService as String: "ui",
                    kSecAttrAccount as String: "protected",
                    kSecValueData as String: Data("p".utf8), kSecAttrAccessControl as String: control,
                ] as CFDictionary, nil) == errSecSuccess)
        #expect(
            SecItemAdd(
                [
                    kSecClass as String: kSecClassGenericPassword, kSecAttrService as String: "ui",
                    kSecAttrAccount as String: "plain",
                    kSecValueData as String: Data("q".utf8),
                ] as CFDictionary, nil) == errSecSuccess)
        let query: [String: Any] = [
            kSecClass as String: kSecClassGenericPassword, kSecAttrService as String: "ui",
            kSecReturnData as String: true,
        ]
        #expect(
            SecItemCopyMatching(
                query.merging([
                    kSecAttrAccount as String: "protected",
                    kSecUseAuthenticationUI as String: kSecUseAuthenticationUIFail,
                ]) { $1 }
                    as CFDictionary, nil) == errSecInteractionNotAllowed)
        var result: AnyObject?
        #expect(
            SecItemCopyMatching(
                query.merging([
                    kSecMatchLimit as String: kSecMatchLimitAll,
                    kSecUseAuthenticationUI as String: kSecUseAuthenticationUISkip,
                ]) { $1 }
                    as CFDictionary, &result) == errSecSuccess)
        #expect((result as? [Data]) == [Data("q".utf8)])
        let quiet = LAContext()
        quiet.interactionNotAllowed = true
        #expect(
            SecItemCopyMatching(
                query.merging([kSecAttrAccount as String: "protected", kSecUseAuthenticationContext as String: quiet]) {
                    $1
                }
                    as CFDictionary, nil) == errSecInteractionNotAllowed)
        #expect(environment.face.attempts == 0)
        // Attributes and existence never prompt.
        #expect(
            SecItemCopyMatching(
                [
                    kSecClass as String: kSecClassGenericPassword, kSecAttrAccount as String: "protected",
                    kSecReturnAttributes as String: true,
                ] as CFDictionary, &result) == errSecSuccess)
        #expect((result as? [String: Any])?[kSecAttrAccessControl as String] is SecAccessControl)
        #expect(environment.face.attempts == 0)
    }

    @Test(
        "accessibility classes are enforced: whenPasscodeSet needs a passcode (errSecAuthFailed), whenUnlocked is refused while locked"
    )
    func accessibility() throws {
        let environment = try CompatEnvironment(passcode: nil)
        let item: [String: Any] = [
            kSecClass as String: kSecClassGenericPassword, kSecAttrService as String: "classes",
            kSecAttrAccount as String: "akpu", kSecValueData as String: Data("v".utf8),
            kSecAttrAccessible as String: kSecAttrAccessibleWhenPasscodeSetThisDeviceOnly,
        ]
        #expect(SecItemAdd(item as CFDictionary, nil) == errSecAuthFailed)
        let passcode = SecretBytes(copying: Array("passcode 1".utf8))
        try KeychainDevice(location: environment.location).setPasscode(passcode)
        #expect(SecItemAdd(item as CFDictionary, nil) == errSecSuccess)
        for code in ["ak", "ck", "dk", "aku", "cku", "dku"] {
            #expect(
                SecItemAdd(
                    item.merging([kSecAttrAccount as String: code, kSecAttrAccessible as String: code]) { $1 }
                        as CFDictionary, nil)
                    == errSecSuccess, "\(code)")
        }
        try KeychainDevice(location: environment.location).lock()
        func read(_ account: String) -> OSStatus {
            SecItemCopyMatching(
                [
                    kSecClass as String: kSecClassGenericPassword, kSecAttrService as String: "classes",
                    kSecAttrAccount as String: account,
                    kSecReturnData as String: true,
                ] as CFDictionary, nil)
        }
        #expect(read("ak") == errSecInteractionNotAllowed)
        #expect(read("akpu") == errSecInteractionNotAllowed)
        #expect(read("ck") == errSecSuccess && read("dk") == errSecSuccess)
        try KeychainDevice(location: environment.location).unlock(passcode: passcode)
        #expect(read("ak") == errSecSuccess && read("aku") == errSecSuccess)
        // The class is queryable and comes back.
        var result: AnyObject?
        #expect(
            SecItemCopyMatching(
                [
                    kSecClass as String: kSecClassGenericPassword, kSecAttrService as String: "classes",
                    kSecAttrAccessible as String: kSecAttrAccessibleAfterFirstUnlockThisDeviceOnly,
                    kSecMatchLimit as String: kSecMatchLimitAll, kSecReturnAttributes as String: true,
                ] as CFDictionary, &result) == errSecSuccess)
        #expect((result as? [[String: Any]])?.map { $0[kSecAttrAccount as String] as? String } == ["cku"])
    }

    @Test(
        "SecCopyErrorMessageString gives Apple's texts; access-control flags are validated as SecAccessControlCreateWithFlags does"
    )
    func messagesAndFlags() {
        #expect(
            SecCopyErrorMessageString(errSecItemNotFound, nil) as String?
                == "The specified item could not be found in the keychain.")
        #expect(
            SecCopyErrorMessageString(errSecDuplicateItem, nil) as String?
                == "The specified item already exists in the keychain.")
        #expect(SecCopyErrorMessageString(-99_999, nil) as String? == "OSStatus -99999")
        var error: Unmanaged<CFError>?
        #expect(
            SecAccessControlCreateWithFlags(
                kCFAllocatorDefault, kSecAttrAccessibleWhenUnlocked, [.biometryAny, .biometryCurrentSet], &error) == nil
        )
        #expect(error.map { CFErrorGetCode($0.takeRetainedValue()) } == Int(errSecParam))
        #expect(
            SecAccessControlCreateWithFlags(
                kCFAllocatorDefault, kSecAttrAccessibleWhenUnlocked, [.biometryAny, .or, .devicePasscode], nil) != nil)
        #expect(
            SecAccessControlCreateWithFlags(kCFAllocatorDefault, "not a class" as CFString, .devicePasscode, nil) == nil
        )
    }

    // MARK: Load

    @Test("8 queues doing 1,000 mixed SecItem calls each lose nothing, every status as iOS gives it")
    func load() throws {
        let environment = try CompatEnvironment(passcode: nil)
        let unexpected = Locked<[String]>([])
        let group = DispatchGroup()
        for queueIndex in 0..<8 {
            group.enter()
            DispatchQueue.global().async {
                defer { group.leave() }
                let service = "load.\(queueIndex)"
                var present: Set<String> = []
                for step in 0..<1000 {
                    let account = "k\(step % 25)"
                    let query: [String: Any] = [
                        kSecClass as String: kSecClassGenericPassword, kSecAttrService as String: service,
                        kSecAttrAccount as String: account,
                    ]
                    let expected: OSStatus
                    let status: OSStatus
                    switch step % 4 {
                    case 0:
                        status = SecItemAdd(
                            query.merging([kSecValueData as String: Data(account.utf8)]) { $1 } as CFDictionary, nil)
                        expected = present.contains(account) ? errSecDuplicateItem : errSecSuccess
                        present.insert(account)
                    case 1:
                        var result: AnyObject?
                        status = SecItemCopyMatching(
                            query.merging([kSecReturnData as String: true]) { $1 } as CFDictionary, &result)
                        expected = present.contains(account) ? errSecSuccess : errSecItemNotFound
                        if status == errSecSuccess, result as? Data != Data(account.utf8) {
                            unexpected.withLock { $0.append("\(service)/\(account): wrong data") }
                        }
                    case 2:
                        status = SecItemUpdate(
                            query as CFDictionary, [kSecValueData as String: Data(account.utf8)] as CFDictionary)
                        expected = present.contains(account) ? errSecSuccess : errSecItemNotFound
                    default:
                        status = step % 8 == 3 ? SecItemDelete(query as CFDictionary) : errSecSuccess
                        expected =
                            step % 8 == 3
                            ? (present.contains(account) ? errSecSuccess : errSecItemNotFound) : errSecSuccess
                        if step % 8 == 3 { present.remove(account) }
                    }
                    if status != expected {
                        unexpected.withLock {
                            $0.append("\(service)/\(account) step \(step): \(status), expected \(expected)")
                        }
                    }
                }
                // Nothing lost: exactly the accounts this queue left are there.
                var result: AnyObject?
                let status = SecItemCopyMatching(
                    [
                        kSecClass as String: kSecClassGenericPassword, kSecAttrService as String: service,
                        kSecMatchLimit as String: kSecMatchLimitAll, kSecReturnAttributes as String: true,
                    ] as CFDictionary, &result)
                let found = Set(
                    (result as? [[String: Any]] ?? []).compactMap { $0[kSecAttrAccount as String] as? String })
                if found != present || (present.isEmpty ? status != errSecItemNotFound : status != errSecSuccess) {
                    unexpected.withLock {
                        $0.append("\(service): found \(found.sorted()), expected \(present.sorted())")
                    }
                }
            }
        }
        group.wait()
        #expect(unexpected.withLock { $0 }.isEmpty, "\(unexpected.withLock { $0 }.prefix(10))")
        _ = environment
    }
}

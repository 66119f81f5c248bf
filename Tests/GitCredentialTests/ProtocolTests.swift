import Foundation
import KeychainEnvironmentTurns
import SecurityCompat
import TPMKeychain
import TPMKeychainTesting
import Testing

/// What git 2.41 and later send helpers (`password_expiry_utc`, `oauth_refresh_token`: t/lib-credential.sh's
/// `helper_test_password_expiry_utc` and `helper_test_oauth_refresh_token`), spoken to the helper
/// directly: the git on the test machines (2.39) drops both attributes before a helper sees them.
/// Then where and how the helper keeps credentials, and how it fails.
@Suite struct ProtocolTests {
    @Test("stores password_expiry_utc, returns it, and overwrites when it changes")
    func passwordExpiry() throws {
        let fixture = try GitFixture()
        try fixture.helper(
            "store",
            [
                "protocol=https", "host=example.com", "username=user-expiry", "password=pass",
                "password_expiry_utc=9999999999",
            ])
        let answer = try fixture.helper("get", ["protocol=https", "host=example.com", "username=user-expiry"])
        #expect(
            answer.lines == ["username=user-expiry", "password=pass", "password_expiry_utc=9999999999"], "\(answer)")

        try fixture.helper(
            "store",
            [
                "protocol=https", "host=example.com", "username=user-expiry-overwrite", "password=pass1",
                "password_expiry_utc=9999999998",
            ])
        try fixture.helper(
            "store",
            [
                "protocol=https", "host=example.com", "username=user-expiry-overwrite", "password=pass2",
                "password_expiry_utc=9999999999",
            ])
        let overwritten = try fixture.helper(
            "get", ["protocol=https", "host=example.com", "username=user-expiry-overwrite"])
        #expect(
            overwritten.lines == [
                "username=user-expiry-overwrite", "password=pass2", "password_expiry_utc=9999999999",
            ], "\(overwritten)")
        try fixture.helper(
            "erase", ["protocol=https", "host=example.com", "username=user-expiry-overwrite", "password=pass2"])
        let erased = try fixture.helper(
            "get", ["protocol=https", "host=example.com", "username=user-expiry-overwrite"])
        #expect(erased.stdout.isEmpty, "\(erased)")
    }

    @Test("never returns an expired password, and ignores storing one")
    func expiredPassword() throws {
        let fixture = try GitFixture()
        let soon = Int(Date().timeIntervalSince1970) + 1
        try fixture.helper(
            "store",
            [
                "protocol=https", "host=example.com", "username=user-soon", "password=pass",
                "password_expiry_utc=\(soon)",
            ])
        let before = try fixture.helper("get", ["protocol=https", "host=example.com", "username=user-soon"])
        #expect(before.lines == ["username=user-soon", "password=pass", "password_expiry_utc=\(soon)"], "\(before)")
        // Past the expiry second: gone for the helper, so git asks (and git never sees it).
        while Int(Date().timeIntervalSince1970) <= soon { usleep(50_000) }
        let after = try fixture.helper("get", ["protocol=https", "host=example.com", "username=user-soon"])
        #expect(after.status == 0 && after.stdout.isEmpty, "\(after)")
        let fill = try fixture.credential("fill", ["protocol=https", "host=example.com", "username=user-soon"])
        #expect(fill.lines.contains("password=askpass-password"), "\(fill)")

        // An expired password is a valid one for a user that has another: the expired one is skipped.
        try fixture.helper("store", ["protocol=https", "host=example.com", "username=user-fresh", "password=fresh"])
        let fallback = try fixture.helper("get", ["protocol=https", "host=example.com"])
        #expect(fallback.lines == ["username=user-fresh", "password=fresh"], "\(fallback)")

        // Storing an already expired password is ignored, as git's approve never sends one: the old one stays.
        try fixture.helper(
            "store",
            [
                "protocol=https", "host=example.com", "username=user-fresh", "password=stale",
                "password_expiry_utc=1000",
            ])
        let kept = try fixture.helper("get", ["protocol=https", "host=example.com", "username=user-fresh"])
        #expect(kept.lines == ["username=user-fresh", "password=fresh"], "\(kept)")
    }

    @Test("stores and returns oauth_refresh_token")
    func oauthRefreshToken() throws {
        let fixture = try GitFixture()
        try fixture.helper(
            "store",
            ["protocol=https", "host=example.com", "username=user4", "password=pass", "oauth_refresh_token=xyzzy"])
        let answer = try fixture.helper("get", ["protocol=https", "host=example.com", "username=user4"])
        #expect(answer.lines == ["username=user4", "password=pass", "oauth_refresh_token=xyzzy"], "\(answer)")
        // A store without the token replaces it (git sends the token whenever it has one).
        try fixture.helper("store", ["protocol=https", "host=example.com", "username=user4", "password=pass2"])
        let replaced = try fixture.helper("get", ["protocol=https", "host=example.com", "username=user4"])
        #expect(replaced.lines == ["username=user4", "password=pass2"], "\(replaced)")
    }

    @Test("a store without username, password, protocol or host is ignored")
    func incompleteStoreIgnored() throws {
        let fixture = try GitFixture()
        for description in [
            ["protocol=https", "host=example.com", "password=no-user"],
            ["protocol=https", "host=example.com", "username=no-password"],
            ["host=example.com", "username=user", "password=no-protocol"],
            ["protocol=https", "username=user", "password=no-host"],
        ] {
            let result = try fixture.helper("store", description)
            #expect(result.stderr.isEmpty, "\(result)")
        }
        // Nothing was kept: not even a store was created.
        #expect(!FileManager.default.fileExists(atPath: fixture.store))

        try fixture.helper("store", ["protocol=https", "host=example.com", "username=user", "password=kept"])
        try fixture.helper("store", ["protocol=https", "host=example.com", "username=user"])
        let answer = try fixture.helper("get", ["protocol=https", "host=example.com"])
        #expect(answer.lines == ["username=user", "password=kept"], "\(answer)")
        // An erase that names nothing would match everything: it erases nothing.
        try fixture.helper("erase", [])
        try fixture.helper("erase", ["password=kept"])
        #expect(
            try fixture.helper("get", ["protocol=https", "host=example.com"]).lines == [
                "username=user", "password=kept",
            ])
    }

    @Test(
        "items are internet passwords SecItem code can find; the secrets are only in the sealed value",
        .keychainEnvironment)
    func storageLayout() throws {
        let fixture = try GitFixture()
        try fixture.helper(
            "store",
            [
                "protocol=https", "host=git.example.com:8443", "path=team/repo.git", "username=deploy",
                "password=p4ssw0rd-in-the-secret", "password_expiry_utc=9999999999",
                "oauth_refresh_token=refresh-in-the-secret",
            ])
        for file in regularFiles(under: fixture.store) {
            let bytes = try Data(contentsOf: URL(fileURLWithPath: file))
            for secret in ["p4ssw0rd-in-the-secret", "refresh-in-the-secret", "9999999999"] {
                #expect(bytes.range(of: Data(secret.utf8)) == nil, "\(file) holds \(secret) in clear")
            }
        }

        try fixture.withSecItemAccess { _ in
            let query: [String: Any] = [
                kSecClass as String: kSecClassInternetPassword, kSecAttrServer as String: "git.example.com",
                kSecAttrProtocol as String: kSecAttrProtocolHTTPS, kSecAttrPort as String: 8443,
                kSecAttrAccount as String: "deploy",
                kSecReturnAttributes as String: true, kSecReturnData as String: true,
            ]
            var result: AnyObject?
            #expect(SecItemCopyMatching(query as CFDictionary, &result) == errSecSuccess)
            let item = try #require(result as? [String: Any])
            #expect(item[kSecAttrPath as String] as? String == "team/repo.git")
            #expect(item[kSecAttrAccessGroup as String] as? String == "git-credential")
            // Attributes carry no secret.
            for (key, value) in item where key != kSecValueData as String {
                let text = "\(value)"
                #expect(
                    !text.contains("p4ssw0rd") && !text.contains("refresh-in") && !text.contains("9999999999"),
                    "attribute \(key) = \(text)")
            }
            let data = try #require(item[kSecValueData as String] as? Data)
            let secret = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
            #expect(secret["password"] as? String == "p4ssw0rd-in-the-secret")
            #expect((secret["password_expiry_utc"] as? NSNumber)?.int64Value == 9_999_999_999)
            #expect(secret["oauth_refresh_token"] as? String == "refresh-in-the-secret")
        }
    }

    @Test(
        "a stored value with a line break is never handed to git (it would add attributes of its writer's choosing), and none is stored",
        .keychainEnvironment
    )
    func lineBreaksNeverReachGit() throws {
        let fixture = try GitFixture()
        // The store exists.
        try fixture.helper("store", ["protocol=https", "host=example.com", "username=seed", "password=pass"])
        // Other code writing into the helper's access group (SecItem, or tpm-keychain add-internet-password -a).
        try fixture.withSecItemAccess { location in
            for (account, password) in [
                ("u\nhost=evil.example", "p"), ("plain", "p\rpassword=injected"), ("nul", "p\u{0}x"),
            ] {
                let add: [String: Any] = [
                    kSecClass as String: kSecClassInternetPassword, kSecAttrServer as String: "planted.example.com",
                    kSecAttrProtocol as String: kSecAttrProtocolHTTPS, kSecAttrPort as String: 0,
                    kSecAttrAccount as String: account,
                    kSecValueData as String: try JSONSerialization.data(withJSONObject: ["password": password]),
                ]
                #expect(SecItemAdd(add as CFDictionary, nil) == errSecSuccess)
                Keychain.closeStore(location)
                let answer = try fixture.helper(
                    ["--keychain", fixture.store, "get"], ["protocol=https", "host=planted.example.com"])
                #expect(answer.status == 65 && answer.stdout.isEmpty, "\(account): \(answer)")
                #expect(!answer.stderr.contains("injected") && !answer.stderr.contains("evil"), "\(answer)")
                let delete: [String: Any] = [
                    kSecClass as String: kSecClassInternetPassword, kSecAttrServer as String: "planted.example.com",
                ]
                #expect(SecItemDelete(delete as CFDictionary) == errSecSuccess)
            }
        }
        // git's own input cannot carry a newline inside a value, but a carriage return it can: refused.
        let stored = try fixture.helper(
            ["--keychain", fixture.store, "store"],
            ["protocol=https", "host=example.com", "username=cr", "password=a\rb"])
        #expect(stored.status == 65, "\(stored)")
        #expect(try fixture.helper("get", ["protocol=https", "host=example.com", "username=cr"]).stdout.isEmpty)
    }

    @Test(
        "without a usable TPM, store fails saying what to do unless TPM_KEYCHAIN_ALLOW_SIMULATED=1; a simulated store is reported on every get",
        .enabled(if: access("/dev/tpmrm0", R_OK | W_OK) != 0, "a TPM is usable here"))
    func simulatedOnlyWhenAllowed() throws {
        let fixture = try GitFixture()
        var environment = fixture.environment
        environment.removeValue(forKey: "TPM_KEYCHAIN_TCTI")
        let credential = ["protocol=https", "host=example.com", "username=user", "password=secret-kept-in-a-simulator"]
        let refused = try runProcess(
            GitFixture.helper, ["--keychain", fixture.store, "store"], environment: environment,
            stdin: credential.map { $0 + "\n" }.joined(), directory: fixture.directory)
        #expect(refused.status == 69 && refused.stderr.contains("TPM_KEYCHAIN_ALLOW_SIMULATED=1"), "\(refused)")
        #expect(!FileManager.default.fileExists(atPath: fixture.store + "/store.meta"))
        environment["TPM_KEYCHAIN_ALLOW_SIMULATED"] = "1"
        let stored = try runProcess(
            GitFixture.helper, ["--keychain", fixture.store, "store"], environment: environment,
            stdin: credential.map { $0 + "\n" }.joined(), directory: fixture.directory)
        #expect(stored.status == 0 && stored.stderr.contains("SIMULATED"), "\(stored)")
        environment.removeValue(forKey: "TPM_KEYCHAIN_ALLOW_SIMULATED")
        let answer = try runProcess(
            GitFixture.helper, ["--keychain", fixture.store, "get"], environment: environment,
            stdin: "protocol=https\nhost=example.com\n\n", directory: fixture.directory)
        #expect(answer.status == 0 && answer.stdout.contains("password=secret-kept-in-a-simulator"), "\(answer)")
        #expect(answer.stderr.contains("warning:") && answer.stderr.contains("simulated TPM"), "\(answer)")
    }

    @Test("the store: --keychain, else TPM_KEYCHAIN_GIT_STORE, else ~/.local/share/tpm-keychain/default")
    func storeLocation() throws {
        let fixture = try GitFixture()
        let store = ["protocol=https", "host=example.com", "username=user", "password=pass"]
        var environment = fixture.environment
        environment.removeValue(forKey: "XDG_DATA_HOME")
        let fromVariable = fixture.directory + "/from-variable"
        #expect(try fixture.helper(["store"], store, environment: ["TPM_KEYCHAIN_GIT_STORE": fromVariable]).status == 0)
        #expect(FileManager.default.fileExists(atPath: fromVariable + "/store.meta"))
        let fromHome = try runProcess(
            GitFixture.helper, ["store"], environment: environment, stdin: store.map { $0 + "\n" }.joined(),
            directory: fixture.directory)
        #expect(fromHome.status == 0, "\(fromHome)")
        #expect(FileManager.default.fileExists(atPath: fixture.home + "/.local/share/tpm-keychain/default/store.meta"))
        // --keychain wins over the variable; a relative path is taken from the working directory.
        let relative = try fixture.helper(
            ["--keychain", "relative-store", "store"], store,
            environment: ["TPM_KEYCHAIN_GIT_STORE": fromVariable])
        #expect(relative.status == 0, "\(relative)")
        #expect(FileManager.default.fileExists(atPath: fixture.directory + "/relative-store/store.meta"))
    }

    @Test("failures: a clear message on stderr, a non-zero status, and never a secret")
    func failures() throws {
        let fixture = try GitFixture()
        let secretDescription = ["protocol=https", "host=example.com", "username=user", "password=do-not-print-me"]

        let unknownOption = try fixture.helper(["--frobnicate", "get"], [])
        #expect(
            unknownOption.status == 64 && unknownOption.stderr.contains("unknown option --frobnicate"),
            "\(unknownOption)")
        let noAction = try fixture.helper(["--keychain", fixture.store], [])
        #expect(noAction.status == 64 && noAction.stderr.contains("no action"), "\(noAction)")
        let missingValue = try fixture.helper(["get", "--keychain"], [])
        #expect(missingValue.status == 64, "\(missingValue)")

        // A line that is not key=value: named by its number, its content not repeated.
        let malformed = try fixture.helper(
            ["--keychain", fixture.store, "store"],
            ["protocol=https", "do-not-print-me-either", "username=user", "password=do-not-print-me"])
        #expect(malformed.status == 64 && malformed.stderr.contains("line 2"), "\(malformed)")
        #expect(!malformed.stderr.contains("do-not-print-me"))

        // A directory that holds something else is not made a store.
        let foreign = fixture.directory + "/foreign"
        try FileManager.default.createDirectory(atPath: foreign, withIntermediateDirectories: true)
        try Data("mine".utf8).write(to: URL(fileURLWithPath: foreign + "/notes.txt"))
        for action in ["store", "get", "erase"] {
            let result = try fixture.helper(["--keychain", foreign, action], secretDescription)
            #expect(result.status != 0 && result.stderr.hasPrefix("git-credential-tpm-keychain: "), "\(result)")
            #expect(!result.stderr.contains("do-not-print-me") && result.stdout.isEmpty, "\(result)")
        }

        // A store its TPM cannot open: unreachable (69), or another TPM than the one that sealed it (65).
        try fixture.helper("store", secretDescription)
        let other = try SoftwareTPM.start()
        defer { other.stop() }
        for (tcti, status) in [("swtpm:path=" + fixture.directory + "/no-such-socket", Int32(69)), (other.tcti, 65)] {
            let result = try fixture.helper(
                ["--keychain", fixture.store, "get"], ["protocol=https", "host=example.com"],
                environment: ["TPM_KEYCHAIN_TCTI": tcti])
            #expect(result.status == status && result.stderr.hasPrefix("git-credential-tpm-keychain: "), "\(result)")
            #expect(!result.stderr.contains("do-not-print-me") && result.stdout.isEmpty, "\(result)")
        }

        // Not failures: no store yet, an action git may add later.
        let noStore = try fixture.helper(
            ["--keychain", fixture.directory + "/none", "get"], ["protocol=https", "host=example.com"])
        #expect(noStore.status == 0 && noStore.stdout.isEmpty && noStore.stderr.isEmpty, "\(noStore)")
        #expect(!FileManager.default.fileExists(atPath: fixture.directory + "/none"))
        let later = try fixture.helper(["--keychain", fixture.directory + "/none", "capability"], [])
        #expect(later.status == 0 && later.stdout.isEmpty && later.stderr.isEmpty, "\(later)")
    }
}

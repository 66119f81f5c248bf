import Foundation
import TPMKeychain
import TPMKeychainTesting
import Testing

@Suite struct OnDiskTests {
    @Test("No secret, service, account, label or comment appears on disk, in contents or names")
    func nothingInClear() throws {
        let store = try TestStore()
        let secrets = [
            "svc-PLAINTEXT-service", "acct-PLAINTEXT-account", "value-PLAINTEXT-password",
            "label-PLAINTEXT", "comment-PLAINTEXT", "group-PLAINTEXT",
        ]
        let keychain = try store.keychain(secrets[0], accessGroup: secrets[5])
        try keychain.set(secrets[2], forKey: secrets[1], label: secrets[3], comment: secrets[4])
        let files = try store.files()
        #expect(files.count >= 3)
        for file in files {
            let contents = try bytes(of: file)
            for secret in secrets {
                #expect(!file.contains(secret), "\(file) names \(secret)")
                #expect(!contents.containsSubsequence(Array(secret.utf8)), "\(file) contains \(secret)")
                #expect(
                    !contents.containsSubsequence(Array(secret.utf8.prefix(8))), "\(file) contains part of \(secret)")
            }
        }
    }

    @Test("Directories are 0700 and files 0600")
    func permissions() throws {
        let store = try TestStore()
        try store.keychain().set("v", forKey: "k")
        let root = store.location.path
        var directories = [root]
        for path in try store.files() {
            #expect(try mode(of: path) == 0o600, "\(path)")
            var directory = (path as NSString).deletingLastPathComponent
            while directory.hasPrefix(root) && directory != root {
                directories.append(directory)
                directory = (directory as NSString).deletingLastPathComponent
            }
        }
        for directory in Set(directories) { #expect(try mode(of: directory) == 0o700, "\(directory)") }
    }

    @Test("Reads leave the item files' access times alone (no inode written back for a read)")
    func readsKeepAccessTimes() throws {
        let store = try TestStore()
        let keychain = try store.keychain()
        try keychain.set("v", forKey: "k")
        let path = try #require(try store.itemFiles().first)
        // An access time before the modification time: relatime would move it on the next read.
        var written = stat()
        #expect(stat(path, &written) == 0)
        var times = [timespec(tv_sec: 1_000_000_000, tv_nsec: 0), written.st_mtim]
        #expect(utimensat(AT_FDCWD, path, &times, 0) == 0)
        Keychain.closeStore(store.location)
        #expect(try keychain.string(forKey: "k") == "v")
        #expect(try keychain.allItems().count == 1)
        var status = stat()
        #expect(stat(path, &status) == 0)
        #expect(status.st_atim.tv_sec == 1_000_000_000)
    }

    @Test func symlinksAreRefused() throws {
        let store = try TestStore()
        let keychain = try store.keychain()
        try keychain.set("v", forKey: "k")
        let path = try #require(try store.itemFiles().first)
        let elsewhere = store.directory + "/elsewhere.item"
        try FileManager.default.moveItem(atPath: path, toPath: elsewhere)
        try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: elsewhere)
        expectKeychainError(.unsafeFileSystem) { _ = try keychain.string(forKey: "k") }

        // A symlinked service directory.
        let serviceDirectory = (path as NSString).deletingLastPathComponent
        let movedDirectory = store.directory + "/moved-service"
        try FileManager.default.moveItem(atPath: serviceDirectory, toPath: movedDirectory)
        try FileManager.default.createSymbolicLink(atPath: serviceDirectory, withDestinationPath: movedDirectory)
        expectKeychainError(.unsafeFileSystem) { try keychain.set("w", forKey: "k") }
        expectKeychainError(.unsafeFileSystem) { _ = try keychain.string(forKey: "k") }
        expectKeychainError(.unsafeFileSystem) { _ = try keychain.contains("k") }
    }

    @Test func hardLinksAreRefused() throws {
        let store = try TestStore()
        let keychain = try store.keychain()
        try keychain.set("v", forKey: "k")
        let path = try #require(try store.itemFiles().first)
        try FileManager.default.linkItem(atPath: path, toPath: store.directory + "/second-link")
        expectKeychainError(.unsafeFileSystem) { _ = try keychain.string(forKey: "k") }
    }

    @Test func groupReadableFilesAndForeignOwnersAreRefused() throws {
        let store = try TestStore()
        let keychain = try store.keychain()
        try keychain.set("v", forKey: "k")
        let path = try #require(try store.itemFiles().first)
        try FileManager.default.setAttributes([.posixPermissions: 0o640], ofItemAtPath: path)
        expectKeychainError(.unsafeFileSystem) { _ = try keychain.string(forKey: "k") }
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: path)
        #expect(try keychain.string(forKey: "k") == "v")
        // Tests run as root in CI, so a foreign owner can be made; as another user, chown fails and
        // the check is covered by the mode test above.
        if geteuid() == 0 {
            try FileManager.default.setAttributes([.ownerAccountID: 4242], ofItemAtPath: path)
            expectKeychainError(.unsafeFileSystem) { _ = try keychain.string(forKey: "k") }
            try FileManager.default.setAttributes([.ownerAccountID: 0], ofItemAtPath: path)
        }
        let directory = (path as NSString).deletingLastPathComponent
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: directory)
        expectKeychainError(.unsafeFileSystem) { try keychain.set("w", forKey: "k") }
        expectKeychainError(.unsafeFileSystem) { _ = try keychain.string(forKey: "k") }
    }

    @Test("A store copied next to a different TPM cannot be opened")
    func hardwareBinding() throws {
        let store = try TestStore()
        try store.keychain().set("bound", forKey: "k")
        let other = try SoftwareTPM.start()
        defer { other.stop() }
        let copy = store.directory + "/copy"
        try FileManager.default.copyItem(atPath: store.location.path, toPath: copy)
        let moved = try Keychain(service: "com.example.tests", location: KeychainLocation(path: copy, tcti: other.tcti))
        do {
            _ = try moved.string(forKey: "k")
            Issue.record("a copied store opened on another TPM")
        } catch {
            #expect(error.code == .wrongTPM)
            #expect(error.message.contains("another TPM"))
        }
        Keychain.closeStore(moved.location)
        // The original still works with its own TPM.
        #expect(try store.keychain().string(forKey: "k") == "bound")
    }

    @Test func unreachableTPMIsATypedError() throws {
        let directory = NSTemporaryDirectory() + "tpm-keychain-unreachable-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let keychain = try Keychain(
            service: "s", location: KeychainLocation(path: directory, tcti: "swtpm:host=127.0.0.1,port=1"))
        expectKeychainError(.tpmUnavailable) { try keychain.set("v", forKey: "k") }
    }
}

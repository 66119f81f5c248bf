import Foundation
import TPMKeychain
import Testing

@Suite struct TamperTests {
    @Test("Every single-byte change to an item file is reported as tampered, never as other data")
    func everyByteFlipIsDetected() throws {
        let store = try TestStore()
        let keychain = try store.keychain()
        try keychain.set("s3cret", forKey: "alice", label: "l")
        let path = try #require(try store.itemFiles().first)
        let original = try bytes(of: path)
        for position in original.indices {
            var tampered = original
            tampered[position] ^= 0x01
            try overwrite(path, with: tampered)
            expectKeychainError(.tampered) { _ = try keychain.string(forKey: "alice") }
        }
        try overwrite(path, with: original)
        #expect(try keychain.string(forKey: "alice") == "s3cret")
    }

    @Test("Header and attribute changes are caught without decrypting the secret")
    func attributeReadsAuthenticate() throws {
        let store = try TestStore()
        let keychain = try store.keychain()
        try keychain.set("s3cret", forKey: "alice")
        let path = try #require(try store.itemFiles().first)
        let original = try bytes(of: path)
        // The header (104 bytes) and the attribute section precede the secret section.
        let secretSectionLength = "s3cret".utf8.count + 16
        for position in 0..<(original.count - secretSectionLength) {
            var tampered = original
            tampered[position] ^= 0x80
            try overwrite(path, with: tampered)
            expectKeychainError(.tampered) { _ = try keychain.contains("alice") }
        }
    }

    @Test("A listing that read an item before still reports every later change to its header or attributes")
    func listingCacheAuthenticates() throws {
        let store = try TestStore()
        let keychain = try store.keychain()
        try keychain.set("s3cret", forKey: "alice", label: "l")
        try keychain.set("other", forKey: "bob")
        // This listing keeps what it decrypted; the ones below find the same salts again.
        #expect(try keychain.allItems().map(\.account) == ["alice", "bob"])
        let path = try #require(try store.itemFiles().first)
        let original = try bytes(of: path)
        // The 124-byte header, then the attributes section: its length (bytes 116..<120) and a tag.
        let attributesLength = original[116..<120].reduce(0) { $0 << 8 | Int($1) }
        for position in 0..<(124 + attributesLength + 16) {
            var tampered = original
            tampered[position] ^= 0x01
            try overwrite(path, with: tampered)
            expectKeychainError(.tampered) { _ = try keychain.allItems() }
        }
        try overwrite(path, with: original)
        #expect(try keychain.allItems().map(\.account) == ["alice", "bob"])
    }

    @Test func swappedFilesAreDetected() throws {
        let store = try TestStore()
        let keychain = try store.keychain()
        try keychain.set("alice's", forKey: "alice")
        try keychain.set("bob's", forKey: "bob")
        // Listed first: what a listing keeps for each write (its key and file name) must not
        // vouch for a file that has since moved.
        #expect(try keychain.allKeys().sorted() == ["alice", "bob"])
        let files = try store.itemFiles()
        #expect(files.count == 2)
        let (first, second) = (try bytes(of: files[0]), try bytes(of: files[1]))
        try overwrite(files[0], with: second)
        try overwrite(files[1], with: first)
        expectKeychainError(.tampered) { _ = try keychain.string(forKey: "alice") }
        expectKeychainError(.tampered) { _ = try keychain.string(forKey: "bob") }
        expectKeychainError(.tampered) { _ = try keychain.allKeys() }
    }

    @Test func renamedFilesAreDetected() throws {
        let store = try TestStore()
        let keychain = try store.keychain()
        try keychain.set("alice's", forKey: "alice")
        #expect(try keychain.allKeys() == ["alice"])
        let path = try #require(try store.itemFiles().first)
        let renamed = (path as NSString).deletingLastPathComponent + "/00000000000000000000000000000000.item"
        try FileManager.default.moveItem(atPath: path, toPath: renamed)
        // A lookup reports it as a listing does, not as "not found".
        expectKeychainError(.tampered) { _ = try keychain.string(forKey: "alice") }
        expectKeychainError(.tampered) { _ = try keychain.contains("alice") }
        expectKeychainError(.tampered) { _ = try keychain.remove("alice") }
        expectKeychainError(.tampered) { _ = try keychain.allKeys() }
        expectKeychainError(.tampered) { _ = try Keychain.allItems(in: store.location) }
    }

    @Test("A file moved into another service's directory is detected")
    func movedAcrossServicesIsDetected() throws {
        let store = try TestStore()
        try store.keychain("service.a").set("a", forKey: "key")
        try store.keychain("service.b").set("b", forKey: "other")
        let files = try store.itemFiles()
        let directories = files.map { ($0 as NSString).deletingLastPathComponent }
        let source = files[0]
        let target = directories[1] + "/" + (source as NSString).lastPathComponent
        try FileManager.default.moveItem(atPath: source, toPath: target)
        expectKeychainError(.tampered) { _ = try Keychain.allItems(in: store.location) }
    }

    @Test func truncatedFilesAreDetected() throws {
        let store = try TestStore()
        let keychain = try store.keychain()
        try keychain.set("a longer secret value", forKey: "alice")
        let path = try #require(try store.itemFiles().first)
        let original = try bytes(of: path)
        for length in [0, 1, 4, 103, 104, 105, original.count / 2, original.count - 16, original.count - 1] {
            try overwrite(path, with: Array(original.prefix(length)))
            expectKeychainError(.tampered) { _ = try keychain.string(forKey: "alice") }
        }
        try overwrite(path, with: original + [0])
        expectKeychainError(.tampered) { _ = try keychain.string(forKey: "alice") }
    }

    @Test("An item copied from another store (another master key) is detected")
    func itemsFromAnotherStoreAreDetected() throws {
        let first = try TestStore()
        let second = try TestStore()
        try first.keychain().set("from the first store", forKey: "alice")
        try second.keychain().set("from the second store", forKey: "alice")
        let source = try #require(try first.itemFiles().first)
        let target = try #require(try second.itemFiles().first)
        try overwrite(target, with: try bytes(of: source))
        expectKeychainError(.tampered) { _ = try second.keychain().string(forKey: "alice") }
    }

    @Test("Restoring an older copy of the same item is reported, never read (RollbackTests has the rest)")
    func rollbackOfOneItemIsDetected() throws {
        let store = try TestStore()
        let keychain = try store.keychain()
        try keychain.set("old password", forKey: "alice")
        let path = try #require(try store.itemFiles().first)
        let older = try bytes(of: path)
        try keychain.set("new password", forKey: "alice")
        try overwrite(path, with: older)
        expectKeychainError(.rolledBack) { _ = try keychain.string(forKey: "alice") }
    }

    @Test func tamperedStoreMetadataIsDetected() throws {
        let store = try TestStore()
        try store.keychain().set("v", forKey: "k")
        Keychain.closeStore(store.location)
        let path = store.location.path + "/store.meta"
        var metadata = try bytes(of: path)
        metadata[10] ^= 0x01 // inside the store ID, which the MAC covers
        try overwrite(path, with: metadata)
        expectKeychainError(.tampered) { _ = try store.keychain().string(forKey: "k") }
    }

    @Test("Swapped service directories are reported by lookups and listings alike")
    func swappedServiceDirectoriesAreDetected() throws {
        let store = try TestStore()
        try store.keychain("service.a").set("a", forKey: "alice")
        try store.keychain("service.b").set("b", forKey: "bob")
        Keychain.closeStore(store.location)
        let directories = Set(try store.itemFiles().map { ($0 as NSString).deletingLastPathComponent }).sorted()
        #expect(directories.count == 2)
        try FileManager.default.moveItem(atPath: directories[0], toPath: directories[0] + ".swap")
        try FileManager.default.moveItem(atPath: directories[1], toPath: directories[0])
        try FileManager.default.moveItem(atPath: directories[0] + ".swap", toPath: directories[1])
        expectKeychainError(.tampered) { _ = try store.keychain("service.a").string(forKey: "alice") }
        expectKeychainError(.tampered) { _ = try store.keychain("service.b").string(forKey: "bob") }
        expectKeychainError(.tampered) { _ = try store.keychain("service.a").allKeys() }
        expectKeychainError(.tampered) { _ = try Keychain.allItems(in: store.location) }
    }

    @Test("A genuine miss stays a miss, also after writes to the same service")
    func genuineMissesAreNotTampering() throws {
        let store = try TestStore()
        let keychain = try store.keychain()
        for index in 0..<20 {
            #expect(try keychain.contains("key\(index)") == false)
            try keychain.add("value \(index)", forKey: "key\(index)")
        }
        #expect(try keychain.string(forKey: "absent") == nil)
        #expect(try keychain.remove("absent") == false)
    }

    @Test("The reserved bytes of store.meta are authenticated as they are on disk")
    func storeMetadataReservedBytesAreAuthenticated() throws {
        let store = try TestStore()
        try store.keychain().set("v", forKey: "k")
        Keychain.closeStore(store.location)
        let path = store.location.path + "/store.meta"
        let original = try bytes(of: path)
        for position in [6, 7] {
            var metadata = original
            metadata[position] ^= 0x01
            try overwrite(path, with: metadata)
            expectKeychainError(.tampered) { _ = try store.keychain().string(forKey: "k") }
            Keychain.closeStore(store.location)
        }
        try overwrite(path, with: original)
        #expect(try store.keychain().string(forKey: "k") == "v")
    }

    @Test("Damaged sealed-key bytes in store.meta are damaged data, never a TPM failure or a refusal")
    func damagedSealedKeyIsTampering() throws {
        let store = try TestStore()
        try store.keychain().set("v", forKey: "k")
        Keychain.closeStore(store.location)
        let path = store.location.path + "/store.meta"
        let original = try bytes(of: path)
        // The sealed object starts at byte 36 and ends 32 bytes (the MAC) before the end; probe
        // its header, name, public and private areas.
        let sealedRange = 36..<(original.count - 32)
        let positions = stride(from: sealedRange.lowerBound, to: sealedRange.upperBound, by: 7).map { $0 }
        let keychain = try store.keychain()
        for position in positions {
            var metadata = original
            metadata[position] ^= 0x40
            try overwrite(path, with: metadata)
            do throws(KeychainError) {
                _ = try keychain.string(forKey: "k")
                Issue.record("byte \(position): a damaged store opened")
            } catch {
                // wrongTPM: a damaged storage-key name is indistinguishable from another TPM's.
                #expect(error.code == .tampered || error.code == .wrongTPM, "byte \(position): \(error)")
            }
            Keychain.closeStore(store.location)
        }
        try overwrite(path, with: original)
        #expect(try store.keychain().string(forKey: "k") == "v")
    }

    @Test("A store whose store.meta was deleted is refused as damaged and never re-initialised")
    func deletedMetadataIsNeverReinitialised() throws {
        let store = try TestStore()
        try store.keychain().set("precious", forKey: "k")
        Keychain.closeStore(store.location)
        let path = store.location.path + "/store.meta"
        let metadata = try bytes(of: path)
        let itemsBefore = try store.itemFiles().map { try bytes(of: $0) }
        try FileManager.default.removeItem(atPath: path)

        expectKeychainError(.tampered) { _ = try store.keychain().string(forKey: "k") }
        expectKeychainError(.tampered) { try store.keychain().set("new", forKey: "other") }
        expectKeychainError(.tampered) { try store.location.checkStore() }
        #expect(!store.location.storeExists)
        #expect(!FileManager.default.fileExists(atPath: path), "a new master key was sealed over the items")
        #expect(try store.itemFiles().map { try bytes(of: $0) } == itemsBefore)

        // Restoring the file restores the store.
        #expect(
            FileManager.default.createFile(
                atPath: path, contents: Data(metadata), attributes: [.posixPermissions: 0o600]))
        #expect(try store.keychain().string(forKey: "k") == "precious")
    }

    @Test("A store is created only in a new or empty directory")
    func storesAreNotCreatedInForeignDirectories() throws {
        let store = try TestStore()
        try FileManager.default.createDirectory(
            atPath: store.location.path, withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o700])
        #expect(FileManager.default.createFile(atPath: store.location.path + "/notes.txt", contents: Data("mine".utf8)))
        expectKeychainError(.invalidParameter) { try store.keychain().set("v", forKey: "k") }
        #expect(!FileManager.default.fileExists(atPath: store.location.path + "/store.meta"))
    }
}

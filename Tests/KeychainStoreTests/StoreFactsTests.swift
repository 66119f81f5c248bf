import Crypto
import Foundation
import KeychainVocabulary
import TPM
import TPMKeychainTesting
import Testing

@testable import KeychainStore

#if canImport(Glibc)
import Glibc
#endif

/// What store.meta version 6 records about a store at its creation (the TPM its key is sealed to,
/// and whether it is shared), and what that record refuses afterwards.
@Suite("what a store was created for")
struct StoreFactsTests {
    static func write(
        _ value: [UInt8], at root: String, tpm: TPMConfiguration, kind: TPMKind? = nil,
        sharedGroup: UInt32? = nil
    ) throws(KeychainError) {
        let store = try ItemStore.open(at: root, tpm: tpm, sharedGroup: sharedGroup, tpmKind: kind)
        defer { store.close() }
        try store.write(
            try ItemIdentity(accessGroup: "", service: "svc", account: "a"), mode: .add,
            value: ItemValue(kind: .data, bytes: value), changes: AttributeChanges())
    }

    static func read(at root: String, tpm: TPMConfiguration, kind: TPMKind? = nil) throws(KeychainError) -> [UInt8]? {
        let store = try ItemStore.open(at: root, tpm: tpm, create: false, tpmKind: kind)
        defer { store.close() }
        return try store.value(try ItemIdentity(accessGroup: "", service: "svc", account: "a"))?.bytes
    }

    static func expectError(
        _ code: KeychainError.Code, mentioning text: String, sourceLocation: SourceLocation = #_sourceLocation,
        _ body: () throws -> Void
    ) {
        do {
            try body()
            Issue.record("expected \(code), but nothing was thrown", sourceLocation: sourceLocation)
        } catch let error as KeychainError {
            #expect(error.code == code && error.message.contains(text), "\(error)", sourceLocation: sourceLocation)
        } catch {
            Issue.record("expected \(code), got \(error)", sourceLocation: sourceLocation)
        }
    }

    @Test("a new store's store.meta is version 6 and records its TPM and its sharing")
    func newStoresRecordTheirFacts() throws {
        let store = try EngineStore()
        let tpm = TPMConfiguration(tcti: store.simulator.tcti)
        try Self.write([1], at: store.path, tpm: tpm)
        let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: store.path + "/store.meta")))
        #expect(bytes[4..<6] == [0, 6])
        #expect(bytes[32..<34] == [0, 2], "item layout 2")
        #expect(bytes[34] == TPMKind.simulator.rawValue)
        #expect(bytes[35] == 0 && bytes[36..<40] == [0, 0, 0, 0], "private")
        #expect(bytes[40..<44] != [0, 0, 0, 0], "a rollback counter")
        let parsed = try StoreMetadata.parse(bytes, path: "store.meta").metadata
        #expect(parsed.facts == StoreMetadata.Facts(tpm: .simulator, sharing: .owner))
        #expect(parsed.version == 2 && parsed.rollbackCounter != nil)
    }

    @Test(
        "a store from before version 6 is given the record at its next open; one that cannot be written then (read-only) still opens, and is recorded later"
    )
    func olderStoresGetTheRecord() throws {
        let store = try EngineStore()
        let tpm = TPMConfiguration(tcti: store.simulator.tcti)
        let root = store.path
        try Self.write([9], at: root, tpm: tpm)
        // Written back as version 4 (layout 2 with a counter, no record), under the store's own key.
        try {
            var metadata = try StoreMetadata.parse(try bytes(of: root + "/store.meta"), path: "store.meta").metadata
            let connection = try TPMConnection(tpm)
            defer { connection.close() }
            let keys = try connection.unseal(metadata.sealedMasterKey).withUnsafeBytes {
                StoreKeys(masterKey: SymmetricKey(data: $0), storeID: metadata.storeID)
            }
            metadata.facts = nil
            try Data(metadata.serialized(metadataKey: keys.metadata)).write(
                to: URL(fileURLWithPath: root + "/store.meta"))
        }()
        let versionFour = try bytes(of: root + "/store.meta")
        #expect(versionFour[4..<6] == [0, 4])

        FaultInjection.arm(.rename, errno: EROFS, pathContaining: root + "/store.meta")
        defer { FaultInjection.disarm() }
        #expect(try Self.read(at: root, tpm: tpm) == [9])
        #expect(try bytes(of: root + "/store.meta") == versionFour)
        FaultInjection.disarm()

        #expect(try Self.read(at: root, tpm: tpm) == [9])
        let recorded = try StoreMetadata.parse(try bytes(of: root + "/store.meta"), path: "store.meta").metadata
        #expect(recorded.facts == StoreMetadata.Facts(tpm: .simulator, sharing: .owner))
        #expect(recorded.storedVersion == 6 && recorded.rollbackCounter != nil)
    }

    @Test(
        "every byte of the record is authenticated: a store made on a TPM device edited to say 'simulator' is refused as tampered"
    )
    func theRecordIsAuthenticated() throws {
        let store = try EngineStore()
        let tpm = TPMConfiguration(tcti: store.simulator.tcti)
        try Self.write([1], at: store.path, tpm: tpm, kind: .device)
        let path = store.path + "/store.meta"
        var bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: path)))
        for (offset, value) in [(34, TPMKind.simulatorInStore.rawValue), (34, TPMKind.simulator.rawValue), (35, 1)] {
            let original = bytes
            bytes[offset] = value
            try Data(bytes).write(to: URL(fileURLWithPath: path))
            expectKeychainError(.tampered) { _ = try Self.read(at: store.path, tpm: tpm) }
            bytes = original
            try Data(bytes).write(to: URL(fileURLWithPath: path))
        }
        #expect(try Self.read(at: store.path, tpm: tpm, kind: .device) == [1])
    }

    @Test(
        "a store made on a TPM device never opens through a simulator, and a recovery never moves it to one; store.meta is left as it was"
    )
    func aDeviceStoreNeverMovesToASimulator() throws {
        let store = try EngineStore()
        let tpm = TPMConfiguration(tcti: store.simulator.tcti)
        let root = store.path
        // This swtpm stands in for the machine's TPM device: the store records what it was told.
        try Self.write([7], at: root, tpm: tpm, kind: .device)
        let recoveryKey = try {
            let opened = try ItemStore.open(at: root, tpm: tpm, create: false, tpmKind: .device)
            defer { opened.close() }
            return try opened.addRecoveryKey()
        }()
        let metadata = try Data(contentsOf: URL(fileURLWithPath: root + "/store.meta"))
        for kind in [TPMKind.simulator, .simulatorInStore] {
            Self.expectError(.wrongTPM, mentioning: "created on a TPM device") {
                _ = try Self.read(at: root, tpm: tpm, kind: kind)
            }
        }
        // A new machine: the recovery key opens the master key, but a simulator is not where it goes.
        let other = try SoftwareTPM.start()
        defer { other.stop() }
        let otherTPM = TPMConfiguration(tcti: other.tcti)
        expectKeychainError(.wrongTPM) { _ = try ItemStore.recover(at: root, recoveryKey: recoveryKey, tpm: otherTPM) }
        #expect(
            try Data(contentsOf: URL(fileURLWithPath: root + "/store.meta")) == metadata,
            "a refused recovery rewrote store.meta")
        #expect(try Self.read(at: root, tpm: tpm, kind: .device) == [7])
        // Onto another TPM device it goes, and stays a device store.
        _ = try ItemStore.recover(at: root, recoveryKey: recoveryKey, tpm: otherTPM, tpmKind: .device)
        #expect(try Self.read(at: root, tpm: otherTPM, kind: .device) == [7])
        expectKeychainError(.wrongTPM) { _ = try Self.read(at: root, tpm: otherTPM) }
    }

    @Test(
        "a private store whose directory was made 2770 is refused, not used as a shared one, until it is private again; nothing is lost",
        .enabled(
            if: geteuid() == 0,
            "needs root: a 2770 directory of a group this user is in, owned by a member (root and group 0)"))
    func aPrivateStoreStaysPrivate() throws {
        let store = try EngineStore()
        let tpm = TPMConfiguration(tcti: store.simulator.tcti)
        let root = store.path
        try Self.write([3], at: root, tpm: tpm)
        #expect(chown(root, 0, 0) == 0 && chmod(root, 0o2770) == 0)
        Self.expectError(.unsafeFileSystem, mentioning: "created for this user alone") {
            _ = try Self.read(at: root, tpm: tpm)
        }
        #expect(chmod(root, 0o700) == 0)
        #expect(try Self.read(at: root, tpm: tpm) == [3])
    }

    @Test(
        "a shared store whose directory was given to another group is refused until it is given back",
        .enabled(if: geteuid() == 0, "needs root: groupadd, and a store shared with groups root is in"))
    func aSharedStoreKeepsItsGroup() throws {
        let store = try EngineStore()
        let tpm = TPMConfiguration(tcti: store.simulator.tcti)
        let group = "tkf" + String(UInt32.random(in: 0...UInt32.max), radix: 36)
        try SystemTool.run("/usr/sbin/groupadd", [group])
        defer { try? SystemTool.run("/usr/sbin/groupdel", [group]) }
        try SystemTool.run("/usr/sbin/usermod", ["-a", "-G", group, "root"])
        let other = try #require(getgrnam(group)?.pointee.gr_gid)
        try FileManager.default.createDirectory(atPath: store.directory, withIntermediateDirectories: true)
        let root = store.path
        try Self.write([5], at: root, tpm: tpm, sharedGroup: 0)
        let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: root + "/store.meta")))
        #expect(bytes[35] == 1 && bytes[36..<40] == [0, 0, 0, 0], "shared with group 0")
        // Every file goes with the directory, as a chgrp -R would: only the record tells.
        try SystemTool.run("/bin/chgrp", ["-R", String(other), root])
        try SystemTool.run("/bin/chmod", ["2770", root])
        Self.expectError(.unsafeFileSystem, mentioning: "created shared with group 0") {
            _ = try Self.read(at: root, tpm: tpm)
        }
        try SystemTool.run("/bin/chgrp", ["-R", "0", root])
        try SystemTool.run("/bin/chmod", ["2770", root])
        #expect(try Self.read(at: root, tpm: tpm) == [5])
    }
}

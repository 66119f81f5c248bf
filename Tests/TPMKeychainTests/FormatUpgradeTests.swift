import Crypto
import Foundation
import StressProcess
import TPM
import TPMKeychain
import TPMKeychainTesting
import Testing

@testable import KeychainStore

#if canImport(Glibc)
import Glibc
#endif

/// Writes format-1 items the way TPMKeychain 0.1 did, for stores to upgrade.
enum FormatOneWriter {
    /// A new, empty format-1 store at `path`, closed again.
    static func createStore(at path: String, tcti: String) throws {
        let store = try ItemStore.open(at: path, tpm: TPMConfiguration(tcti: tcti), newStoreVersion: 1)
        store.close()
    }

    /// Writes `value` as a format-1 item file of `identity` into an open format-1 store.
    static func write(_ value: String, for identity: ItemIdentity, label: String?, into store: ItemStore) throws {
        let state = try store.current()
        #expect(state.layout.version == 1)
        let names = store.names(identity, state)
        let directory = try #require(try Directory.open(names.group, in: state.layout.items, create: true))
        let now = Date(timeIntervalSince1970: 1_700_000_000.123)
        let record = ItemRecord(
            itemID: randomBytes(16), generation: 7,
            attributes: ItemAttributes(
                service: identity.service, account: identity.account,
                accessGroupName: identity.accessGroup, label: label, comment: nil,
                genericData: nil, creationDate: now, modificationDate: now,
                accessibility: .afterFirstUnlock),
            value: ItemValue(kind: .string, bytes: Array(value.utf8)))
        let bytes = try ItemFileV1.encode(
            record, keys: state.keys, storeID: store.storeID, salt: randomBytes(32), nonce: randomBytes(12))
        try directory.replace(names.file, with: bytes, durable: false)
    }
}

@Suite("format 2 and the upgrade from format 1")
struct FormatUpgradeTests {
    @Test(
        "new stores are format 2 with a rollback counter: items2/, a version-6 store.meta naming layout 2 and the counter, no items/"
    )
    func newStoresAreFormatTwo() throws {
        let store = try TestStore()
        try store.keychain().set("v", forKey: "k")
        let opened = try ItemStore.open(
            at: store.location.path, tpm: TPMConfiguration(tcti: store.simulator.tcti), create: false)
        defer { opened.close() }
        #expect(opened.formatVersion == 2)
        #expect(FileManager.default.fileExists(atPath: store.location.path + "/items2"))
        #expect(!FileManager.default.fileExists(atPath: store.location.path + "/items"))
        let metadata = try bytes(of: store.location.path + "/store.meta")
        #expect(metadata[4..<6] == [0, 6] && metadata[32..<34] == [0, 2], "store.meta version 6, item layout 2")
        #expect(metadata[40..<44] != [0, 0, 0, 0], "a rollback counter")
        let file = try #require(try store.itemFiles().first)
        #expect(try bytes(of: file)[4..<6] == [0, 2], "item format 2")
    }

    @Test(
        "the format-1 fixture is read as it is, and its first write moves it to format 2 with every item, date and ID kept"
    )
    func fixtureUpgrade() throws {
        let copy = NSTemporaryDirectory() + "tpm-keychain-upgrade-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: copy) }
        try copyVersionOneFixture(to: copy)
        let simulator = try SoftwareTPM.start(.init(stateDirectory: copy + "/swtpm"))
        defer { simulator.stop() }
        let configuration = TPMConfiguration(tcti: simulator.tcti)
        let expected = try ProjectFixtures.load("store-v1/expected.json", as: ExpectedStore.self)

        let store = try ItemStore.open(at: copy, tpm: configuration, create: false)
        defer { store.close() }
        #expect(store.formatVersion == 1)
        let before = try store.listAll()
        let records = try before.map { try #require(try store.item(ItemIdentity(checked: $0))) }
        #expect(before.count == expected.items.count)

        try store.write(
            try ItemIdentity(accessGroup: "", service: "com.example.new", account: "first"), mode: .add,
            value: ItemValue(kind: .string, bytes: Array("after".utf8)), changes: AttributeChanges())
        #expect(store.formatVersion == 2)
        #expect(!FileManager.default.fileExists(atPath: copy + "/items"))
        #expect(!FileManager.default.fileExists(atPath: copy + "/items2.tmp"))
        for record in records {
            let identity = ItemIdentity(checked: record.attributes)
            let upgraded = try #require(try store.item(identity))
            #expect(upgraded.value == record.value)
            #expect(upgraded.itemID == record.itemID && upgraded.generation == record.generation)
            #expect(upgraded.attributes == record.attributes, "labels, comments, dates and accessibility kept")
        }
        #expect(try store.listAll().count == expected.items.count + 1)
        // And through the public API, in a fresh open.
        let location = try KeychainLocation(path: copy, tcti: simulator.tcti)
        defer { Keychain.closeStore(location) }
        for item in expected.items {
            #expect(
                try Keychain(service: item.service, location: location).string(forKey: item.account) == item.password)
        }
    }

    @Test(
        "A store written by format version 2 (with the swtpm state it was sealed to) still opens and reads, in creation order"
    )
    func readsTheVersionTwoStore() throws {
        let expected = try ProjectFixtures.load("store-v2/expected.json", as: ExpectedStore.self)
        let copy = NSTemporaryDirectory() + "tpm-keychain-store-v2-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: copy) }
        try copyFixtureStore("store-v2", to: copy)
        let simulator = try SoftwareTPM.start(.init(stateDirectory: copy + "/swtpm"))
        defer { simulator.stop() }
        let location = try KeychainLocation(path: copy, tcti: simulator.tcti)
        defer { Keychain.closeStore(location) }

        let all = try Keychain.allItems(in: location)
        #expect(all.map(\.account) == expected.items.map(\.account), "creation order")
        for item in expected.items {
            let keychain = try Keychain(service: item.service, location: location)
            #expect(try keychain.string(forKey: item.account) == item.password, "\(item.service)/\(item.account)")
            let attributes = try #require(try keychain.attributes(forKey: item.account))
            #expect(attributes.label == item.label)
            #expect(attributes.comment == item.comment)
        }
        // Opened on a TPM with room for it, the store got its rollback counter, and store.meta
        // version 6 with what the store is (layout 2, a simulator, private).
        let metadata = try bytes(of: copy + "/store.meta")
        #expect(metadata[4..<6] == [0, 6] && metadata[32..<36] == [0, 2, 2, 0], "\(metadata.prefix(44))")
        #expect(metadata[40..<44] != [0, 0, 0, 0], "a rollback counter")
    }

    @Test("another open instance of the same store follows an upgrade made by someone else")
    func readersFollowAnUpgrade() throws {
        let store = try TestStore()
        try FormatOneWriter.createStore(at: store.location.path, tcti: store.simulator.tcti)
        let configuration = TPMConfiguration(tcti: store.simulator.tcti)
        let reader = try ItemStore.open(at: store.location.path, tpm: configuration, create: false)
        defer { reader.close() }
        let identities = try (0..<5).map { try ItemIdentity(accessGroup: "", service: "svc", account: "a\($0)") }
        for identity in identities {
            try FormatOneWriter.write("value \(identity.account)", for: identity, label: nil, into: reader)
        }
        #expect(try reader.value(identities[0])?.bytes == Array("value a0".utf8))

        let writer = try ItemStore.open(at: store.location.path, tpm: configuration, create: false)
        defer { writer.close() }
        _ = try writer.delete(identities[4])
        #expect(writer.formatVersion == 2)
        // The reader still thinks format 1, and its items/ is gone: it must follow, not report "not found".
        for identity in identities.dropLast() {
            #expect(try reader.value(identity)?.bytes == Array("value \(identity.account)".utf8))
        }
        #expect(try reader.value(identities[4]) == nil)
        #expect(reader.formatVersion == 2)
        #expect(try reader.list(service: "svc", accessGroup: "").count == 4)
    }

    @Test("kill -9 at random points of the upgrade, 100 times: the store always opens and every item reads its value")
    func killedUpgrades() throws {
        let store = try TestStore()
        try FormatOneWriter.createStore(at: store.location.path, tcti: store.simulator.tcti)
        let configuration = TPMConfiguration(tcti: store.simulator.tcti)
        let count = 150
        let identities = try (0..<count).map {
            try ItemIdentity(accessGroup: "", service: "svc.\($0 % 7)", account: "account-\($0)")
        }
        do {
            let opened = try ItemStore.open(at: store.location.path, tpm: configuration, create: false)
            defer { opened.close() }
            for identity in identities {
                try FormatOneWriter.write("secret of \(identity.account)", for: identity, label: "L", into: opened)
            }
        }
        let pristine = store.directory + "/pristine"
        try FileManager.default.copyItem(atPath: store.location.path, toPath: pristine)

        var outcomes: [UInt16: Int] = [:]
        for cycle in 0..<100 {
            try FileManager.default.removeItem(atPath: store.location.path)
            try FileManager.default.copyItem(atPath: pristine, toPath: store.location.path)
            // Killed where KillPoint says, on both sides of the switch to format 2.
            let killPoint = KillPoint.forRound(cycle, items: count)
            let writer = try WriterProcess(
                store: store, service: "svc.0", accounts: ["trigger"], count: 1, extraArguments: killPoint.arguments)
            writer.waitFor(killPoint.line)
            writer.kill()

            let opened = try ItemStore.open(at: store.location.path, tpm: configuration, create: false)
            defer { opened.close() }
            outcomes[opened.formatVersion ?? 0, default: 0] += 1
            for identity in identities {
                let value = try opened.value(identity)
                #expect(
                    value?.bytes == Array("secret of \(identity.account)".utf8), "cycle \(cycle): \(identity.account)")
            }
            // The next cycle starts again from the pristine copy, from before the store had a
            // rollback counter: the counter this cycle gave it goes too, or the copy would (rightly)
            // read as put back from before its protection.
            if cycle < 99, let index = opened.rollbackCounterIndex {
                let undefined = try TPM2Tools.run(
                    ["tpm2_nvundefine", "0x" + String(index, radix: 16), "-C", "o"], tcti: store.simulator.tcti)
                #expect(undefined.status == 0, "\(undefined.errorOutput)")
            }
        }
        // Both sides of the switch were hit.
        #expect((outcomes[1] ?? 0) > 0 && (outcomes[2] ?? 0) > 0, "outcomes by version: \(outcomes)")
        // A store left in format 1 finishes its upgrade on the next write; leftovers go.
        let final = try ItemStore.open(at: store.location.path, tpm: configuration, create: false)
        defer { final.close() }
        _ = try final.delete(try ItemIdentity(accessGroup: "", service: "svc.0", account: "trigger"))
        #expect(final.formatVersion == 2)
        #expect(try final.listAll().count == count)
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: store.location.path)
            .filter { $0 == "items" || $0 == "items2.tmp" }
        #expect(leftovers.isEmpty, "\(leftovers)")
    }

    @Test("unknown attributes survive a rewrite, and attributes can be cleared")
    func unknownTagsSurviveAndAttributesClear() throws {
        let store = try TestStore()
        let keychain = try store.keychain()
        try keychain.set("v1", forKey: "k", label: "Label", comment: "Comment")
        // Add a tag this version does not know, as a later version would.
        let opened = try ItemStore.open(
            at: store.location.path, tpm: TPMConfiguration(tcti: store.simulator.tcti), create: false)
        defer { opened.close() }
        let identity = try ItemIdentity(accessGroup: "", service: "com.example.tests", account: "k")
        let state = try opened.current()
        let names = opened.names(identity, state)
        let path = try #require(try store.itemFiles().first)
        var contents = try opened.readContents(
            try bytes(of: path), path: path, expectedPrimaryKey: names.encodedIdentity, state)
        let future = try #require(FourCharacterCode(text: "futr"))
        contents.attributes[future] = [9, 9, 9]
        try overwrite(path, with: try opened.encode(contents, state))

        try keychain.set("v2", forKey: "k")
        try opened.write(
            identity, mode: .update, value: nil, changes: AttributeChanges(clearing: [AttributeTag.comment]))
        let after = try opened.readContents(
            try bytes(of: path), path: path, expectedPrimaryKey: names.encodedIdentity, try opened.current())
        #expect(after.attributes[future] == [9, 9, 9])
        #expect(String(decoding: after.value, as: UTF8.self) == "v2")
        #expect(after.attributes.string(AttributeTag.label) == "Label")
        #expect(after.attributes.string(AttributeTag.comment) == nil)
        #expect(after.generation == 3)
    }
}

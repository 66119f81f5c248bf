import Foundation
import TPM
import TPMKeychain
import TPMKeychainTesting
import Testing

/// Export archives on real swtpms: Apple's rule for what leaves, passphrase and device-key
/// protection, and an archive refused whole when any byte of it is changed, cut or moved.
@Suite struct ArchiveTests {
    static let passcode = SecretBytes(copying: Array("correct horse 4711".utf8))
    /// A cheap scrypt so each test derives in milliseconds; exports use ``KeychainArchive/PassphraseCost/standard``.
    static let cheap = KeychainArchive.PassphraseCost(log2N: 10, blockSize: 8, parallelism: 1)
    static let passphrase = "a long export passphrase"

    /// A source store with items of every kind the rule tells apart: three that leave (one
    /// bound to the lock state), one ThisDeviceOnly, one bound to the device passcode.
    static func populatedSource() async throws -> TestStore {
        let source = try TestStore()
        try KeychainDevice(location: source.location).setPasscode(passcode)
        let keychain = try source.keychain("com.example.mail")
        try keychain.set("hunter2", forKey: "alice@example.com", label: "Mail", comment: "work account")
        try keychain.set(Data([0, 1, 2, 255]), forKey: "token", accessibility: .afterFirstUnlock)
        try keychain.set("stays", forKey: "device-bound", accessibility: .whenUnlockedThisDeviceOnly)
        // A class with no constraint, under a passcode: the TPM refuses it while the device is locked.
        try await keychain.set("while unlocked", forKey: "session", accessControl: try AccessControl(.whenUnlocked))
        try await keychain.set(
            "needs the passcode", forKey: "pin-protected",
            accessControl: try AccessControl(.afterFirstUnlock, flags: .devicePasscode))
        return source
    }

    func temporaryPath(_ store: TestStore, _ name: String = "export.tkar") -> String {
        store.directory + "-" + name
    }

    /// `source` exported to a new archive under ``passphrase`` at the cheap cost; its path.
    func passphraseArchive(of source: TestStore) async throws -> String {
        let archive = temporaryPath(source)
        _ = try await KeychainArchive.export(
            from: source.location, to: archive, protection: .passphrase(Self.passphrase, cost: Self.cheap))
        return archive
    }

    @Test(
        "a passphrase archive carries what may leave, with attributes and dates, to a store on another TPM; ThisDeviceOnly and access-controlled items stay and are counted"
    )
    func passphraseRoundTrip() async throws {
        let source = try await Self.populatedSource()
        let archive = temporaryPath(source)
        defer { try? FileManager.default.removeItem(atPath: archive) }
        let exported = try await KeychainArchive.export(
            from: source.location, to: archive, protection: .passphrase(Self.passphrase, cost: Self.cheap))
        #expect(exported.exported == 3)
        #expect(
            Set(exported.skipped.map(\.reason)) == [.thisDeviceOnly, .accessControl] && exported.skipped.count == 2,
            "\(exported.skipped)")
        #expect(try mode(of: archive) == 0o600)
        let bytes = try bytes(of: archive)
        for plaintext in ["hunter2", "alice@example.com", "com.example.mail", "work account", "Mail"] {
            #expect(!contains(bytes, Array(plaintext.utf8)), "\(plaintext) is in the archive in clear")
        }

        let target = try TestStore()
        let imported = try await KeychainArchive.importArchive(
            at: archive, into: target.location, passphrase: Self.passphrase)
        #expect(imported.added == 3 && imported.skipped.isEmpty)
        let before = try source.keychain("com.example.mail")
        let after = try target.keychain("com.example.mail")
        #expect(try after.string(forKey: "alice@example.com") == "hunter2")
        #expect(try after.data(forKey: "token") == Data([0, 1, 2, 255]))
        #expect(try after.allKeys().sorted() == ["alice@example.com", "session", "token"])
        #expect(try after.string(forKey: "session") == "while unlocked")
        let original = try #require(try before.attributes(forKey: "alice@example.com"))
        let copy = try #require(try after.attributes(forKey: "alice@example.com"))
        #expect(copy.label == "Mail" && copy.comment == "work account")
        #expect(copy.creationDate == original.creationDate && copy.modificationDate == original.modificationDate)
        #expect(try after.attributes(forKey: "token")?.accessibility == .afterFirstUnlock)
    }

    @Test(
        "an import never writes a Secret Service collection's own settings item (label and rules): an archive carrying one skips it, and the target's own is unchanged"
    )
    func importSkipsCollectionSettings() async throws {
        let source = try TestStore()
        try source.keychain("org.freedesktop.secrets.collection").set("rules lifted", forKey: "properties")
        try source.keychain("com.example.app").set("kept", forKey: "user")
        let archive = try await passphraseArchive(of: source)
        defer { try? FileManager.default.removeItem(atPath: archive) }

        let target = try TestStore()
        try target.keychain("org.freedesktop.secrets.collection").set("the target's own", forKey: "properties")
        for conflicts in [KeychainArchive.ConflictPolicy.replace, .skip] {
            let report = try await KeychainArchive.importArchive(
                at: archive, into: target.location, passphrase: Self.passphrase, conflicts: conflicts)
            // The first pass adds the other item; the second finds it present.
            let expected: [KeychainArchive.SkipReason] =
                conflicts == .replace ? [.collectionSettings] : [.alreadyPresent, .collectionSettings]
            #expect(Set(report.skipped.map(\.reason)) == Set(expected), "\(report.skipped)")
            #expect(report.skipped.count == expected.count, "\(report.skipped)")
        }
        #expect(try target.keychain("com.example.app").string(forKey: "user") == "kept")
        #expect(
            try target.keychain("org.freedesktop.secrets.collection").string(forKey: "properties")
                == "the target's own")
    }

    @Test(
        "an import told which access groups it may write skips every item of another (an archive from someone else plants nothing in another app's group); without that it writes them all"
    )
    func importLimitedToAccessGroups() async throws {
        let source = try TestStore()
        try source.keychain("com.example.app", accessGroup: "com.example.app").set("mine", forKey: "user")
        try source.keychain("com.bank.app", accessGroup: "com.bank.app").set("planted", forKey: "session")
        try source.keychain("com.example.tool").set("no group", forKey: "user")
        let archive = try await passphraseArchive(of: source)
        defer { try? FileManager.default.removeItem(atPath: archive) }

        let target = try TestStore()
        let planned = try await KeychainArchive.importArchive(
            at: archive, into: target.location, passphrase: Self.passphrase, accessGroups: ["com.example.app"],
            dryRun: true)
        #expect(planned.planned.filter { $0.reason == .otherAccessGroup }.count == 2, "\(planned.planned)")
        let report = try await KeychainArchive.importArchive(
            at: archive, into: target.location, passphrase: Self.passphrase, accessGroups: ["com.example.app"])
        #expect(report.added == 1 && report.skipped.count == 2, "\(report)")
        #expect(report.skipped.allSatisfy { $0.reason == .otherAccessGroup }, "\(report.skipped)")
        #expect(try target.keychain("com.example.app", accessGroup: "com.example.app").string(forKey: "user") == "mine")
        #expect(try target.keychain("com.bank.app", accessGroup: "com.bank.app").string(forKey: "session") == nil)
        #expect(try target.keychain("com.example.tool").string(forKey: "user") == nil)

        // "" names items of no group; no list writes every group.
        let noGroup = try await KeychainArchive.importArchive(
            at: archive, into: target.location, passphrase: Self.passphrase, accessGroups: [""])
        #expect(noGroup.added == 1, "\(noGroup)")
        #expect(try target.keychain("com.example.tool").string(forKey: "user") == "no group")
        let everything = try await KeychainArchive.importArchive(
            at: archive, into: target.location, passphrase: Self.passphrase)
        #expect(everything.added == 1 && everything.skipped.count == 2, "\(everything)")
        #expect(try target.keychain("com.bank.app", accessGroup: "com.bank.app").string(forKey: "session") == "planted")
    }

    @Test("a locked keychain's lock-state items stay, counted as locked; nothing needing a person is ever asked for")
    func lockedItemsStay() async throws {
        let source = try await Self.populatedSource()
        try KeychainDevice(location: source.location).lock()
        let archive = temporaryPath(source)
        defer { try? FileManager.default.removeItem(atPath: archive) }
        let exported = try await KeychainArchive.export(
            from: source.location, to: archive, protection: .passphrase(Self.passphrase, cost: Self.cheap))
        // The session item, bound to the lock state, waits for an unlock; the others leave.
        #expect(exported.exported == 2, "\(exported.skipped)")
        #expect(exported.skipped.contains { $0.reason == .deviceLocked && $0.item.contains("session") })
    }

    @Test("a wrong passphrase is refused as an authentication failure and nothing is written")
    func wrongPassphrase() async throws {
        let source = try await Self.populatedSource()
        let archive = try await passphraseArchive(of: source)
        defer { try? FileManager.default.removeItem(atPath: archive) }
        let target = try TestStore()
        await expectArchiveError(.authenticationFailed) {
            _ = try await KeychainArchive.importArchive(at: archive, into: target.location, passphrase: "not it at all")
        }
        await expectArchiveError(.authenticationFailed) {
            _ = try await KeychainArchive.importArchive(at: archive, into: target.location)
        }
        #expect(try Keychain.allItems(in: target.location).isEmpty)
        await expectArchiveError(.invalidParameter) {
            _ = try await KeychainArchive.export(
                from: source.location, to: archive, protection: .passphrase(Self.passphrase, cost: Self.cheap))
        }
    }

    @Test(
        "every changed byte, cut, dropped, repeated or reordered chunk, and trailing byte is refused before anything is imported"
    )
    func tamperedArchivesRefusedWhole() async throws {
        let source = try TestStore()
        let keychain = try source.keychain()
        for index in 0..<5 { try keychain.set("value \(index)", forKey: "key \(index)") }
        let archive = try await passphraseArchive(of: source)
        defer { try? FileManager.default.removeItem(atPath: archive) }
        let original = try bytes(of: archive)
        // Header: magic, version, kind, log2N, r, p (5), salt (32).
        let headerSize = 6 + 5 + 32
        var chunks: [[UInt8]] = []
        var offset = headerSize
        while offset < original.count {
            let length =
                Int(original[offset]) << 24 | Int(original[offset + 1]) << 16 | Int(original[offset + 2]) << 8
                | Int(original[offset + 3])
            chunks.append(Array(original[offset..<offset + 4 + length]))
            offset += 4 + length
        }
        #expect(chunks.count == 7, "begin, five items, end")
        let header = Array(original[0..<headerSize])

        var variants: [(String, [UInt8])] = []
        for position in stride(from: 0, to: original.count, by: max(1, original.count / 97)) + [original.count - 1] {
            var changed = original
            changed[position] ^= 0x20
            variants.append(("byte \(position) changed", changed))
        }
        for cut in [
            1, 5, headerSize, headerSize + 3, headerSize + chunks[0].count, original.count - chunks[6].count,
            original.count - 1,
        ] {
            variants.append(("cut to \(cut) bytes", Array(original[0..<cut])))
        }
        variants.append(("a middle chunk dropped", header + chunks[0] + chunks[1] + chunks[3...].joined()))
        variants.append(("a chunk repeated", header + chunks[0...2].joined() + chunks[2...].joined()))
        variants.append(("two chunks swapped", header + chunks[0] + chunks[2] + chunks[1] + chunks[3...].joined()))
        variants.append(("the end chunk dropped", header + chunks[0..<6].joined()))
        variants.append(("a byte appended", original + [0]))
        variants.append(("a second archive appended", original + original))

        let target = try TestStore()
        let altered = temporaryPath(source, "altered.tkar")
        defer { try? FileManager.default.removeItem(atPath: altered) }
        for (what, bytes) in variants {
            try? FileManager.default.removeItem(atPath: altered)
            #expect(FileManager.default.createFile(atPath: altered, contents: Data(bytes)))
            do {
                let report = try await KeychainArchive.importArchive(
                    at: altered, into: target.location, passphrase: Self.passphrase)
                Issue.record("\(what): imported \(report.added) items")
            } catch {
                let accepted: [KeychainError.Code] = [
                    .tampered, .authenticationFailed, .decodingFailed, .unsupportedVersion,
                ]
                #expect(accepted.contains(error.code), "\(what): \(error)")
            }
            #expect(try Keychain.allItems(in: target.location).isEmpty, "\(what) imported something")
        }
        // The original still imports: the refusals were the changes, not the target.
        let report = try await KeychainArchive.importArchive(
            at: archive, into: target.location, passphrase: Self.passphrase)
        #expect(report.added == 5)
    }

    @Test(
        "a header asking for more scrypt than any export uses, a later version, an unknown protection or another file is refused before any derivation"
    )
    func headersRefusedBeforeDerivation() async throws {
        let source = try TestStore()
        try source.keychain().set("v", forKey: "k")
        let archive = try await passphraseArchive(of: source)
        defer { try? FileManager.default.removeItem(atPath: archive) }
        let original = try bytes(of: archive)
        let target = try TestStore()
        let altered = temporaryPath(source, "header.tkar")
        defer { try? FileManager.default.removeItem(atPath: altered) }
        // Offsets: 4 version, 5 protection, 6 log2 N, 7-8 r, 9-10 p.
        let cases: [(String, Int, UInt8, KeychainError.Code)] = [
            ("N = 2^30 (16 TiB with r = 8)", 6, 30, .tampered), ("N = 2^9", 6, 9, .tampered),
            ("r = 0x2008", 7, 0x20, .tampered), ("version 2", 4, 2, .unsupportedVersion),
            ("protection 9", 5, 9, .unsupportedVersion), ("magic", 0, UInt8(ascii: "X"), .decodingFailed),
        ]
        for (what, offset, value, code) in cases {
            var changed = original
            changed[offset] = value
            try? FileManager.default.removeItem(atPath: altered)
            #expect(FileManager.default.createFile(atPath: altered, contents: Data(changed)))
            await expectArchiveError(code) {
                _ = try await KeychainArchive.importArchive(
                    at: altered, into: target.location, passphrase: Self.passphrase)
            }
            #expect(try Keychain.allItems(in: target.location).isEmpty, "\(what)")
        }
        #expect(try KeychainArchive.kind(ofArchiveAt: archive) == .passphrase)
    }

    @Test(
        "an archive for a device import key opens only in the TPM that holds it: another store, on another TPM, is refused as wrongTPM"
    )
    func deviceKeyArchive() async throws {
        let source = try await Self.populatedSource()
        let machineA = try TestStore()
        let machineB = try TestStore()
        let keyA = try KeychainArchive.deviceImportKey(for: machineA.location)
        #expect(try KeychainArchive.deviceImportKey(for: machineA.location) == keyA, "made once, then reused")
        #expect(try DeviceImportKey(keyA.description) == keyA)
        #expect(keyA.fingerprint.hasPrefix("SHA256:"))
        let archive = temporaryPath(source)
        defer { try? FileManager.default.removeItem(atPath: archive) }
        let exported = try await KeychainArchive.export(
            from: source.location, to: archive, protection: .deviceKey(keyA))
        #expect(exported.exported == 3)
        #expect(try KeychainArchive.kind(ofArchiveAt: archive) == .deviceKey(fingerprint: keyA.fingerprint))

        // B has no import key, then one of its own: both refused.
        await expectArchiveError(.wrongTPM) {
            _ = try await KeychainArchive.importArchive(at: archive, into: machineB.location)
        }
        _ = try KeychainArchive.deviceImportKey(for: machineB.location)
        await expectArchiveError(.wrongTPM) {
            _ = try await KeychainArchive.importArchive(at: archive, into: machineB.location)
        }
        #expect(try Keychain.allItems(in: machineB.location).count == 0)

        let imported = try await KeychainArchive.importArchive(at: archive, into: machineA.location)
        #expect(imported.added == 3)
        #expect(try machineA.keychain("com.example.mail").string(forKey: "alice@example.com") == "hunter2")
        // The import key itself never leaves: it lives in the TPM and is ThisDeviceOnly.
        let again = temporaryPath(machineA, "again.tkar")
        defer { try? FileManager.default.removeItem(atPath: again) }
        let second = try await KeychainArchive.export(
            from: machineA.location, to: again, protection: .passphrase(Self.passphrase, cost: Self.cheap))
        #expect(second.exported == 3 && second.skipped.map(\.reason) == [.thisDeviceOnly], "\(second.skipped)")
    }

    @Test(
        "after the target's TPM is cleared its store is recovered, but its device import key died with the TPM: the archive made for it is refused"
    )
    func clearedTPMKillsTheArchive() async throws {
        let source = try await Self.populatedSource()
        let target = try TestStore()
        let key = try KeychainArchive.deviceImportKey(for: target.location)
        let recoveryKey = try target.location.addRecoveryKey()
        let archive = temporaryPath(source)
        defer { try? FileManager.default.removeItem(atPath: archive) }
        _ = try await KeychainArchive.export(from: source.location, to: archive, protection: .deviceKey(key))

        Keychain.closeStore(target.location)
        // TPM2_Clear with the (empty) lockout authorization: a new storage seed.
        let cleared = try TPM2Tools.run(["tpm2_clear", "-c", "l"], tcti: target.simulator.tcti)
        #expect(cleared.status == 0, "\(cleared)")
        await expectArchiveError(.wrongTPM) {
            _ = try await KeychainArchive.importArchive(at: archive, into: target.location)
        }
        // Recovered onto the cleared TPM: the key item, bound to the old TPM, is removed.
        let report = try target.location.recover(with: recoveryKey)
        #expect(report.itemsRemoved == 1, "the device import key")
        await expectArchiveError(.wrongTPM) {
            _ = try await KeychainArchive.importArchive(at: archive, into: target.location)
        }
        let fresh = try KeychainArchive.deviceImportKey(for: target.location)
        #expect(fresh != key, "a new key, in the new TPM")
        await expectArchiveError(.wrongTPM) {
            _ = try await KeychainArchive.importArchive(at: archive, into: target.location)
        }
    }

    @Test(
        "a dry run lists each change and writes nothing; skip keeps the store's item, replace writes over it, keep-both adds beside it"
    )
    func conflictPolicies() async throws {
        let source = try TestStore()
        try source.keychain().set("archived", forKey: "shared")
        try source.keychain().set("only archived", forKey: "new")
        let archive = try await passphraseArchive(of: source)
        defer { try? FileManager.default.removeItem(atPath: archive) }

        let target = try TestStore()
        let keychain = try target.keychain()
        try keychain.set("mine", forKey: "shared")
        let plan = try await KeychainArchive.importArchive(
            at: archive, into: target.location, passphrase: Self.passphrase, dryRun: true)
        let byItem = Dictionary(uniqueKeysWithValues: plan.planned.map { ($0.item, $0) })
        #expect(byItem.count == 2, "\(plan.planned)")
        #expect(byItem.first { $0.key.contains("\"shared\"") }?.value.action == .skip, "\(plan.planned)")
        #expect(byItem.first { $0.key.contains("\"shared\"") }?.value.reason == .alreadyPresent)
        #expect(byItem.first { $0.key.contains("\"new\"") }?.value.action == .add, "\(plan.planned)")
        #expect(try keychain.allKeys() == ["shared"], "a dry run wrote")

        let skipped = try await KeychainArchive.importArchive(
            at: archive, into: target.location, passphrase: Self.passphrase)
        #expect(skipped.added == 1 && skipped.skipped.count == 1)
        #expect(try keychain.string(forKey: "shared") == "mine")

        let kept = try await KeychainArchive.importArchive(
            at: archive, into: target.location, passphrase: Self.passphrase, conflicts: .keepBoth)
        #expect(kept.keptBoth == 2, "both names exist now")
        #expect(try keychain.string(forKey: "shared (imported)") == "archived")
        #expect(try keychain.string(forKey: "shared") == "mine")

        let replaced = try await KeychainArchive.importArchive(
            at: archive, into: target.location, passphrase: Self.passphrase, conflicts: .replace)
        #expect(replaced.replaced == 2)
        #expect(try keychain.string(forKey: "shared") == "archived")
    }

    @Test(
        "an import into a locked keychain adds its items, as adding while locked does on iOS; they open once the keychain is unlocked"
    )
    func importWhileLocked() async throws {
        let source = try TestStore()
        try source.keychain().set("archived", forKey: "one")
        let archive = try await passphraseArchive(of: source)
        defer { try? FileManager.default.removeItem(atPath: archive) }
        let target = try TestStore()
        let device = KeychainDevice(location: target.location)
        try device.setPasscode(Self.passcode)
        try device.lock()
        let report = try await KeychainArchive.importArchive(
            at: archive, into: target.location, passphrase: Self.passphrase)
        #expect(report.added == 1)
        let keychain = try target.keychain()
        #expect(throws: KeychainError.self) { _ = try keychain.string(forKey: "one") }
        try device.unlock(passcode: Self.passcode)
        #expect(try keychain.string(forKey: "one") == "archived")
    }

    @Test("an existing item bound to access control is not replaced by an archived one that is not")
    func protectedItemsAreNotReplaced() async throws {
        let source = try TestStore()
        try source.keychain().set("archived", forKey: "pin")
        let archive = try await passphraseArchive(of: source)
        defer { try? FileManager.default.removeItem(atPath: archive) }
        let target = try TestStore()
        try KeychainDevice(location: target.location).setPasscode(Self.passcode)
        try await target.keychain().set(
            "protected here", forKey: "pin", accessControl: try AccessControl(.whenUnlocked, flags: .devicePasscode))
        let report = try await KeychainArchive.importArchive(
            at: archive, into: target.location, passphrase: Self.passphrase, conflicts: .replace)
        #expect(report.replaced == 0 && report.skipped.map(\.reason) == [.protectedHere])
        #expect(try target.keychain().accessControl(forKey: "pin")?.flags == .devicePasscode)
    }
}

func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
    guard !needle.isEmpty, haystack.count >= needle.count else { return false }
    for start in 0...(haystack.count - needle.count) where haystack[start] == needle[0] {
        if Array(haystack[start..<start + needle.count]) == needle { return true }
    }
    return false
}

func expectArchiveError(
    _ code: KeychainError.Code, sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () async throws -> Void
) async {
    do {
        try await body()
        Issue.record("expected KeychainError.\(code), but nothing was thrown", sourceLocation: sourceLocation)
    } catch let error as KeychainError {
        #expect(error.code == code, "got \(error)", sourceLocation: sourceLocation)
    } catch {
        Issue.record("expected KeychainError.\(code), got \(error)", sourceLocation: sourceLocation)
    }
}

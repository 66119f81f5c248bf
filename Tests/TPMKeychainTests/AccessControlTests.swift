import Foundation
import SystemCalls
import TPMKeychain
import TPMKeychainTesting
import Testing

@testable import KeychainStore
@testable import TPM

/// Access control on a real swtpm: passcode, biometryCurrentSet, lock states, reuse, errors.
@Suite(.tags(.concurrency)) struct AccessControlTests {
    static let passcode = SecretBytes(copying: Array("correct horse 4711".utf8))
    static let wrong = SecretBytes(copying: Array("wrong horse 0000".utf8))

    /// A store with a device passcode, a simulated Face ID and a context that can use both.
    final class Fixture: Sendable {
        let store: TestStore
        let face = SimulatedAuthenticator(biometryType: .faceID)
        let device: KeychainDevice
        let keychain: Keychain

        init(passcode: Bool = true) throws {
            store = try TestStore()
            device = KeychainDevice(location: store.location)
            keychain = try store.keychain()
            if passcode { try device.setPasscode(AccessControlTests.passcode) }
        }

        func context(
            reuse: Duration = .zero, passcode: SecretBytes = AccessControlTests.passcode,
            applicationIdentifier: String = "tests"
        ) -> AuthenticationContext {
            let context = AuthenticationContext(
                authenticator: face, passcode: .fixed(passcode), applicationIdentifier: applicationIdentifier,
                location: store.location)
            context.allowableReuseDuration = reuse
            return context
        }

        func failedAuthorizations() throws -> UInt32 {
            try device.status().dictionaryAttack.failedAuthorizations
        }
    }

    // MARK: Vocabulary

    @Test("flags are validated by Apple's SecAccessControlCreateWithFlags rules")
    func flagValidation() throws {
        for invalid: AccessControl.Flags in [
            [.or, .and, .biometryAny, .devicePasscode], [.biometryAny, .biometryCurrentSet],
            [.userPresence, .devicePasscode], [.userPresence, .or], [.companion],
            [.or], [.privateKeyUsage, .biometryAny, .biometryCurrentSet], AccessControl.Flags(rawValue: 1 << 7),
        ] {
            expectKeychainError(.invalidParameter) { _ = try AccessControl(.whenUnlocked, flags: invalid) }
        }
        for valid: AccessControl.Flags in [
            [], [.userPresence], [.biometryAny], [.biometryCurrentSet], [.devicePasscode],
            [.biometryCurrentSet, .or, .devicePasscode], [.biometryAny, .and, .devicePasscode],
            [.biometryAny, .devicePasscode], [.privateKeyUsage], [.privateKeyUsage, .biometryCurrentSet],
            [.privateKeyUsage, .userPresence],
        ] {
            #expect(throws: Never.self) { _ = try AccessControl(.whenUnlockedThisDeviceOnly, flags: valid) }
        }
        // Apple's raw values.
        #expect(
            AccessControl.Flags.biometryCurrentSet.rawValue == 8 && AccessControl.Flags.or.rawValue == 16384
                && AccessControl.Flags.and.rawValue == 32768 && AccessControl.Flags.devicePasscode.rawValue == 16)
        // Several constraints without .or mean all of them, as on iOS.
        let implicitAnd = Protection(try AccessControl(.whenUnlocked, flags: [.biometryAny, .devicePasscode]))
        #expect(implicitAnd.needsBothProtectors)
    }

    // MARK: Passcode

    @Test("a devicePasscode item opens with the passcode only, and a wrong one is counted by the TPM")
    func passcodeItem() async throws {
        let fixture = try Fixture()
        try await fixture.keychain.set(
            "s3cret", forKey: "pin-item", accessControl: try AccessControl(.whenUnlocked, flags: .devicePasscode))
        #expect(try await fixture.keychain.get("pin-item", as: String.self, context: fixture.context()) == "s3cret")
        // Without a context there is nobody to ask.
        expectKeychainError(.interactionNotAllowed) { _ = try fixture.keychain.get("pin-item", as: String.self) }
        let before = try fixture.failedAuthorizations()
        await expectAsyncKeychainError(.authenticationFailed) {
            _ = try await fixture.keychain.get(
                "pin-item", as: String.self, context: fixture.context(passcode: Self.wrong))
        }
        #expect(try fixture.failedAuthorizations() == before + 1)
        // Attributes never need the passcode.
        #expect(try fixture.keychain.allKeys() == ["pin-item"])
        #expect(try fixture.keychain.accessControl(forKey: "pin-item")?.flags == .devicePasscode)
    }

    @Test("adding a passcode-bound item without a passcode set is refused, as iOS refuses it")
    func passcodeNotSet() async throws {
        let fixture = try Fixture(passcode: false)
        for control in [
            try AccessControl(.whenPasscodeSetThisDeviceOnly), try AccessControl(.whenUnlocked, flags: .devicePasscode),
        ] {
            await expectAsyncKeychainError(.passcodeNotSet) {
                try await fixture.keychain.set("x", forKey: "k", accessControl: control)
            }
        }
        expectKeychainError(.passcodeNotSet) { try fixture.device.lock() }
        #expect(try fixture.keychain.allKeys().isEmpty)
    }

    @Test(
        "brute force stops at the TPM's lockout, the right passcode is then refused, and biometry-only items stay readable"
    )
    func bruteForceLockout() async throws {
        let fixture = try Fixture()
        try fixture.store.simulator.setDictionaryAttackParameters(
            maxTries: 3, recoveryTime: 1000, lockoutRecovery: 1000)
        try await fixture.keychain.set(
            "pin", forKey: "pin", accessControl: try AccessControl(.whenUnlocked, flags: .devicePasscode))
        try await fixture.keychain.set(
            "face", forKey: "face", accessControl: try AccessControl(.whenUnlocked, flags: .biometryCurrentSet),
            context: fixture.context())
        var codes: [KeychainError.Code] = []
        for _ in 0..<5 {
            do {
                _ = try await fixture.keychain.get(
                    "pin", as: String.self, context: fixture.context(passcode: Self.wrong))
            } catch {
                codes.append(error.code)
            }
        }
        #expect(codes == [.authenticationFailed, .authenticationFailed, .authenticationFailed, .lockout, .lockout])
        await expectAsyncKeychainError(.lockout) {
            _ = try await fixture.keychain.get("pin", as: String.self, context: fixture.context())
        }
        #expect(try fixture.device.status().dictionaryAttack.inLockout)
        // The enrollment counter, the lock state and the biometric record are all noDA.
        #expect(try await fixture.keychain.get("face", as: String.self, context: fixture.context()) == "face")
        try fixture.store.simulator.resetDictionaryAttackLockout()
        #expect(try await fixture.keychain.get("pin", as: String.self, context: fixture.context()) == "pin")
    }

    @Test("changing the passcode rewrites no item, and the old sealed key put back does not open with the old passcode")
    func passcodeChangeAndReplay() async throws {
        let fixture = try Fixture()
        try await fixture.keychain.set(
            "v", forKey: "k", accessControl: try AccessControl(.whenUnlocked, flags: .devicePasscode))
        let itemsBefore = try fixture.store.itemFiles().map { try bytes(of: $0) }
        let deviceFile = fixture.store.directory + "/device/device.meta"
        let oldDevice = try bytes(of: deviceFile)
        let new = SecretBytes(copying: Array("new passcode 2026".utf8))
        try fixture.device.changePasscode(from: Self.passcode, to: new)
        #expect(try fixture.store.itemFiles().map { try bytes(of: $0) } == itemsBefore)
        #expect(try await fixture.keychain.get("k", as: String.self, context: fixture.context(passcode: new)) == "v")
        await expectAsyncKeychainError(.authenticationFailed) {
            _ = try await fixture.keychain.get("k", as: String.self, context: fixture.context())
        }
        // Put the old device state back: its sealed key names the old passcode epoch, which the TPM refuses.
        try overwrite(deviceFile, with: oldDevice)
        await expectAsyncKeychainError(.itemInvalidated) {
            _ = try await fixture.keychain.get("k", as: String.self, context: fixture.context())
        }
        try fixture.store.simulator.resetDictionaryAttackLockout()
    }

    @Test(
        "removing the passcode makes passcode-only and whenPasscodeSet items unreadable; reads keep them, a purge deletes them"
    )
    func passcodeRemoval() async throws {
        let fixture = try Fixture()
        try await fixture.keychain.set(
            "a", forKey: "akpu", accessControl: try AccessControl(.whenPasscodeSetThisDeviceOnly))
        try await fixture.keychain.set(
            "b", forKey: "pin", accessControl: try AccessControl(.whenUnlocked, flags: .devicePasscode))
        try await fixture.keychain.set(
            "c", forKey: "either", accessControl: try AccessControl(.whenUnlocked, flags: .userPresence),
            context: fixture.context())
        #expect(try fixture.keychain.get("akpu", as: String.self) == "a")
        try fixture.device.removePasscode(Self.passcode)
        let files = try fixture.store.itemFiles().count
        await expectAsyncKeychainError(.itemInvalidated) {
            _ = try await fixture.keychain.get("akpu", as: String.self, context: fixture.context())
        }
        await expectAsyncKeychainError(.itemInvalidated) {
            _ = try await fixture.keychain.get("pin", as: String.self, context: fixture.context())
        }
        // A read reports; it deletes nothing.
        #expect(try fixture.store.itemFiles().count == files)
        await expectAsyncKeychainError(.itemInvalidated) {
            _ = try await fixture.keychain.get("akpu", as: String.self, context: fixture.context())
        }
        // A new passcode is a new key: what the old one protected stays unreadable.
        try fixture.device.setPasscode(Self.passcode)
        await expectAsyncKeychainError(.itemInvalidated) {
            _ = try await fixture.keychain.get("pin", as: String.self, context: fixture.context())
        }
        // userPresence still opens with biometry.
        #expect(try await fixture.keychain.get("either", as: String.self, context: fixture.context()) == "c")
        // The purge proves it with the passcode counter and deletes exactly those two.
        #expect(try fixture.store.location.purgeInvalidatedItems().counts == [2, 2])
        #expect(try await fixture.keychain.get("pin", as: String.self, context: fixture.context()) == nil)
        #expect(try fixture.keychain.allKeys().sorted() == ["either"])
        #expect(try fixture.store.location.purgeInvalidatedItems().counts == [0, 0])
    }

    // MARK: A read never deletes

    @Test(
        "a reader whose device state is another (another XDG_STATE_HOME, a Flatpak, another member) is refused a devicePasscode item; nothing is deleted and the owner still reads it"
    )
    func anotherDeviceStateDeletesNothing() async throws {
        let fixture = try Fixture()
        try await fixture.keychain.set(
            "p", forKey: "pin", accessControl: try AccessControl(.whenUnlocked, flags: .devicePasscode))
        try await fixture.keychain.set(
            "a", forKey: "akpu", accessControl: try AccessControl(.whenPasscodeSetThisDeviceOnly))
        let files = try fixture.store.files()
        for otherPasscode in [false, true] {
            var other = fixture.store.location
            other.deviceDirectory = fixture.store.directory + "/other-device-\(otherPasscode)"
            if otherPasscode { try KeychainDevice(location: other).setPasscode(Self.passcode) }
            let stranger = try Keychain(service: "com.example.tests", location: other)
            let context = AuthenticationContext(
                authenticator: fixture.face, passcode: .fixed(Self.passcode), location: other)
            for key in ["pin", "akpu"] {
                let error = await expectAsyncKeychainError(
                    .interactionNotAllowed, "\(key), other passcode: \(otherPasscode)"
                ) {
                    _ = try await stranger.get(key, as: String.self, context: context)
                }
                #expect("\(String(describing: error))".contains("another device"), "\(String(describing: error))")
            }
            // The stranger's purge proves nothing about another device's items.
            #expect(try other.purgeInvalidatedItems().counts == [0, 0])
        }
        #expect(try fixture.store.files() == files)
        #expect(try await fixture.keychain.get("pin", as: String.self, context: fixture.context()) == "p")
        #expect(try await fixture.keychain.get("akpu", as: String.self, context: fixture.context()) == "a")
    }

    @Test(
        "device state removed and put back (a restored ~/.local/state): reads in between are refused, nothing is deleted, the items open again"
    )
    func removedDeviceStateDeletesNothing() async throws {
        let fixture = try Fixture()
        try await fixture.keychain.set(
            "p", forKey: "pin", accessControl: try AccessControl(.whenUnlocked, flags: .devicePasscode))
        let device = fixture.store.directory + "/device"
        try FileManager.default.moveItem(atPath: device, toPath: device + ".saved")
        await expectAsyncKeychainError(.interactionNotAllowed) {
            _ = try await fixture.keychain.get("pin", as: String.self, context: fixture.context())
        }
        #expect(try fixture.store.location.purgeInvalidatedItems().counts == [0, 0])
        #expect(try fixture.keychain.allKeys() == ["pin"])
        try? FileManager.default.removeItem(atPath: device)
        try FileManager.default.moveItem(atPath: device + ".saved", toPath: device)
        #expect(try await fixture.keychain.get("pin", as: String.self, context: fixture.context()) == "p")
    }

    @Test(
        "the enrollment counter undefined by the TPM's owner is 'cannot check now'; defined again by someone else (their authorization), it is reported as taken; neither read nor purge deletes anything"
    )
    func undefinedOrReplacedCounterDeletesNothing() async throws {
        let fixture = try Fixture()
        let context = fixture.context()
        try await fixture.keychain.set(
            "bound", forKey: "bound", accessControl: try AccessControl(.whenUnlocked, flags: .biometryCurrentSet),
            context: context)
        let counter = try fixture.device.status().nvIndices[0]
        let handle = "0x" + String(counter, radix: 16)
        Keychain.closeStore(fixture.store.location)
        let undefined = try TPM2Tools.run(["tpm2_nvundefine", handle, "-C", "o"], tcti: fixture.store.simulator.tcti)
        #expect(undefined.status == 0, "\(undefined.errorOutput)")
        await expectAsyncKeychainError(.notAvailable) {
            _ = try await fixture.keychain.get("bound", as: String.self, context: context)
        }
        #expect(try fixture.store.location.purgeInvalidatedItems().counts == [0, 0])
        #expect(try fixture.keychain.allKeys() == ["bound"])
        // Defined again by someone else, with the same attributes and an authorization of their own, and moved.
        let defined = try TPM2Tools.run(
            [
                "tpm2_nvdefine", handle, "-C", "o", "-s", "8", "-a", "authread|authwrite|no_da|nt=counter", "-p",
                "theirs",
            ],
            tcti: fixture.store.simulator.tcti)
        #expect(defined.status == 0, "\(defined.errorOutput)")
        #expect(
            try TPM2Tools.run(["tpm2_nvincrement", handle, "-P", "theirs"], tcti: fixture.store.simulator.tcti).status
                == 0)
        let error = await expectAsyncKeychainError(.notAvailable) {
            _ = try await fixture.keychain.get("bound", as: String.self, context: context)
        }
        #expect("\(String(describing: error))".contains("someone else"), "\(String(describing: error))")
        #expect(try fixture.store.location.purgeInvalidatedItems().counts == [0, 0])
        #expect(try fixture.keychain.allKeys() == ["bound"])
    }

    // MARK: Device state

    @Test(
        "device.meta is authenticated: an edited enrollment hash, salt or passcode key is tampered and not used (no dictionary-attack failure counted for the right passcode); put back, it works"
    )
    func deviceStateIsAuthenticated() async throws {
        let fixture = try Fixture()
        try await fixture.keychain.set(
            "p", forKey: "pin", accessControl: try AccessControl(.whenUnlocked, flags: .devicePasscode))
        let path = fixture.store.directory + "/device/device.meta"
        let original = try bytes(of: path)
        #expect(original[4] == 0 && original[5] == 2)
        for (what, offset) in [("enrollment hash", 16), ("passcode salt", 48), ("passcode public key", 88)] {
            var edited = original
            edited[offset] ^= 0x01
            try overwrite(path, with: edited)
            let error = await expectAsyncKeychainError(.tampered, what) {
                _ = try await fixture.keychain.get("pin", as: String.self, context: fixture.context())
            }
            #expect(
                "\(String(describing: error))".contains("fails authentication"), "\(what): \(String(describing: error))"
            )
            try overwrite(path, with: original)
        }
        #expect(try fixture.failedAuthorizations() == 0)
        #expect(try await fixture.keychain.get("pin", as: String.self, context: fixture.context()) == "p")
    }

    @Test(
        "a version-1 device (handles from the user ID, empty authorization, no MAC) keeps working: read as it is, written back as version 2 with a MAC, reported as open to other users"
    )
    func versionOneDeviceKeepsWorking() async throws {
        let fixture = try Fixture(passcode: false)
        let directory = fixture.store.directory + "/device"
        try FileManager.default.createDirectory(
            atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let legacyBase = UInt32(0x0154_4B00) + (UInt32(getuid()) % 4096) * 4
        var versionOne = Array("TKDV".utf8) + [0, 1, 0, 0]
        versionOne += withUnsafeBytes(of: legacyBase.bigEndian) { Array($0) }
        versionOne += [UInt8](repeating: 0, count: 122 - versionOne.count)
        #expect(
            FileManager.default.createFile(
                atPath: directory + "/device.meta", contents: Data(versionOne), attributes: [.posixPermissions: 0o600]))
        let before = try fixture.device.status()
        #expect(before.nvIndices == [legacyBase, legacyBase + 1, legacyBase + 2] && before.nvIndicesOpenToOtherUsers)
        try fixture.device.setPasscode(Self.passcode)
        let written = try bytes(of: directory + "/device.meta")
        #expect(
            written[4] == 0 && written[5] == 2 && written[12] & 4 != 0,
            "written back as version 2 with the version-1 flag")
        try await fixture.keychain.set(
            "p", forKey: "pin", accessControl: try AccessControl(.whenUnlocked, flags: .devicePasscode))
        #expect(try await fixture.keychain.get("pin", as: String.self, context: fixture.context()) == "p")
        #expect(try fixture.device.status().nvIndices.first == legacyBase)
    }

    // MARK: Biometry

    @Test(
        "biometryCurrentSet is invalidated by the TPM on add, remove and re-enroll; biometryAny and userPresence survive"
    )
    func enrollmentChanges() async throws {
        for change in ["add", "remove", "reenroll"] {
            let fixture = try Fixture()
            let touch = SimulatedAuthenticator(biometryType: .touchID, enrolled: ["thumb", "index"])
            let context = AuthenticationContext(
                authenticator: touch, passcode: .fixed(Self.passcode), location: fixture.store.location)
            try await fixture.keychain.set(
                "current", forKey: "current",
                accessControl: try AccessControl(.whenUnlocked, flags: .biometryCurrentSet), context: context)
            try await fixture.keychain.set(
                "any", forKey: "any", accessControl: try AccessControl(.whenUnlocked, flags: .biometryAny),
                context: context)
            try await fixture.keychain.set(
                "presence", forKey: "presence", accessControl: try AccessControl(.whenUnlocked, flags: .userPresence),
                context: context)
            try await fixture.keychain.set(
                "or", forKey: "or",
                accessControl: try AccessControl(.whenUnlocked, flags: [.biometryCurrentSet, .or, .devicePasscode]),
                context: context)
            #expect(try await fixture.keychain.get("current", as: String.self, context: context) == "current")
            switch change {
            case "add": touch.enroll("ring")
            case "remove": touch.unenroll("index")
            default: touch.reenroll()
            }
            let attempts = touch.attempts
            await expectAsyncKeychainError(.itemInvalidated, "\(change)") {
                _ = try await fixture.keychain.get("current", as: String.self, context: context)
            }
            // Nobody is asked to match for an item that can never open again.
            #expect(touch.attempts == attempts, "\(change)")
            // Kept: a second read reports it again (a reader never deletes).
            await expectAsyncKeychainError(.itemInvalidated, "\(change)") {
                _ = try await fixture.keychain.get("current", as: String.self, context: context)
            }
            #expect(try await fixture.keychain.get("any", as: String.self, context: context) == "any")
            #expect(try await fixture.keychain.get("presence", as: String.self, context: context) == "presence")
            // biometryCurrentSet .or devicePasscode falls back to the passcode.
            #expect(try await fixture.keychain.get("or", as: String.self, context: context) == "or")
            #expect(try fixture.keychain.allKeys().sorted() == ["any", "current", "or", "presence"])
            // The purge proves it with the enrollment counter; the .or item has the passcode left and stays.
            #expect(try fixture.store.location.purgeInvalidatedItems().counts == [1, 1], "\(change)")
            #expect(try await fixture.keychain.get("current", as: String.self, context: context) == nil)
            #expect(try fixture.keychain.allKeys().sorted() == ["any", "or", "presence"])
        }
    }

    @Test("invalidation survives restoring the store and device from a backup, and re-creating the counter")
    func invalidationIsPermanent() async throws {
        let fixture = try Fixture()
        let context = fixture.context()
        try await fixture.keychain.set(
            "bound", forKey: "bound", accessControl: try AccessControl(.whenUnlocked, flags: .biometryCurrentSet),
            context: context)
        let backup = fixture.store.directory + "-backup"
        try FileManager.default.copyItem(atPath: fixture.store.directory, toPath: backup)
        defer { try? FileManager.default.removeItem(atPath: backup) }
        let originalEnrollment = try #require(try await fixture.face.enrollment())
        fixture.face.reenroll()
        await expectAsyncKeychainError(.itemInvalidated) {
            _ = try await fixture.keychain.get("bound", as: String.self, context: context)
        }

        // Restore every file from before the change; the authenticator is not restored, so the
        // library sees a different enrollment again and the counter only goes up.
        Keychain.closeStore(fixture.store.location)
        try FileManager.default.removeItem(atPath: fixture.store.directory + "/store")
        try FileManager.default.removeItem(atPath: fixture.store.directory + "/device")
        try FileManager.default.copyItem(atPath: backup + "/store", toPath: fixture.store.directory + "/store")
        try FileManager.default.copyItem(atPath: backup + "/device", toPath: fixture.store.directory + "/device")
        await expectAsyncKeychainError(.itemInvalidated) {
            _ = try await fixture.keychain.get("bound", as: String.self, context: context)
        }

        // Restore the files once more, then delete the counter and define it again: a new counter
        // starts above every value a counter had, so the old epoch never comes back.
        Keychain.closeStore(fixture.store.location)
        try FileManager.default.removeItem(atPath: fixture.store.directory + "/store")
        try FileManager.default.copyItem(atPath: backup + "/store", toPath: fixture.store.directory + "/store")
        let indices = try fixture.device.status().nvIndices
        let before = try #require(try fixture.device.status().enrollmentCounter)
        do {
            let tpm = try TPMConnection(TPMConfiguration(tcti: fixture.store.simulator.tcti))
            defer { tpm.close() }
            try tpm.undefineNVIndex(indices[0])
        }
        // The library defines it again (as the device defines it) when it next needs it: at the
        // next enrollment check.
        _ = originalEnrollment
        fixture.face.reenroll()
        await expectAsyncKeychainError(.itemInvalidated) {
            _ = try await fixture.keychain.get("bound", as: String.self, context: context)
        }
        #expect(try #require(try fixture.device.status().enrollmentCounter) > before)
    }

    @Test("after an enrollment change the TPM itself refuses the record's sealed key (not only the library)")
    func directUnsealIsRefusedByTheTPM() async throws {
        let fixture = try Fixture()
        let context = fixture.context()
        try await fixture.keychain.set(
            "bound", forKey: "bound",
            accessControl: try AccessControl(.whenUnlockedThisDeviceOnly, flags: .biometryCurrentSet), context: context)
        let recordPath = try #require(try fixture.store.files().first { $0.hasSuffix(".key") })
        let recordBytes = try bytes(of: recordPath)
        let store = try ItemStore.open(
            at: fixture.store.location.path, tpm: TPMConfiguration(tcti: fixture.store.simulator.tcti), create: false)
        defer { store.close() }
        let record = try KeyRecord(
            parsing: recordBytes, storeID: store.storeID, metadataKey: try store.current().keys.metadata,
            path: recordPath)
        store.close()
        // The device's NV authorization, as the library holds it.
        let device = Device(
            directory: fixture.store.directory + "/device",
            tpm: TPMConfiguration(tcti: fixture.store.simulator.tcti))
        let authorizations = try device.withConnection { (connection) throws(KeychainError) in
            guard let state = try device.state(connection) else { throw KeychainError(.notAvailable, "no device") }
            return device.nvAuthorizations(state)
        }
        #expect(authorizations.count == 3)
        var tpm = try TPMConnection(TPMConfiguration(tcti: fixture.store.simulator.tcti))
        let policy = try record.sealedPolicy { (index) throws(KeychainError) in
            do { return try tpm.nvIndexName(index) } catch { throw KeychainError(.tpmUnavailable, "\(error)") }
        }
        let sealed = try #require(record.sealedProtector)
        // Without the device's authorization PolicyNV is refused: no one else can evaluate the policy.
        #expect(throws: TPMError.self) { _ = try tpm.unseal(sealed, policy: policy) }
        #expect(try tpm.unseal(sealed, policy: policy, nvAuthorizations: authorizations).count == 32)
        tpm.close() // the library takes the TPM next
        fixture.face.reenroll()
        await expectAsyncKeychainError(.itemInvalidated) {
            _ = try await fixture.keychain.get("bound", as: String.self, context: context)
        }
        // The same sealed object, the same policy, straight to the TPM: TPM_RC_POLICY from PolicyNV.
        tpm = try TPMConnection(TPMConfiguration(tcti: fixture.store.simulator.tcti))
        defer { tpm.close() }
        do {
            _ = try tpm.unseal(sealed, policy: policy, nvAuthorizations: authorizations)
            Issue.record("the TPM released a key bound to an old enrollment")
        } catch let error as TPMError {
            #expect(error.code == .policyCheckFailed, "\(error)")
        }
    }

    // MARK: Contexts

    @Test("interaction not allowed and cancel fail as iOS fails, without prompting and without touching the DA counter")
    func interactionAndCancel() async throws {
        let fixture = try Fixture()
        try await fixture.keychain.set(
            "x", forKey: "x", accessControl: try AccessControl(.whenUnlocked, flags: .userPresence),
            context: fixture.context())
        let before = try fixture.failedAuthorizations()
        let quiet = fixture.context()
        quiet.interactionNotAllowed = true
        await expectAsyncKeychainError(.interactionNotAllowed) {
            _ = try await fixture.keychain.get("x", as: String.self, context: quiet)
        }
        #expect(fixture.face.attempts == 0)
        fixture.face.nextOutcomes = [.cancel]
        await expectAsyncKeychainError(.userCanceled) {
            _ = try await fixture.keychain.get("x", as: String.self, context: fixture.context())
        }
        #expect(fixture.face.attempts == 1)
        fixture.face.nextOutcomes = [.noMatch]
        await expectAsyncKeychainError(.authenticationFailed) {
            _ = try await fixture.keychain.get("x", as: String.self, context: fixture.context())
        }
        #expect(try fixture.failedAuthorizations() == before)
        let invalidated = fixture.context()
        invalidated.invalidate()
        await expectAsyncKeychainError(.interactionNotAllowed) {
            _ = try await fixture.keychain.get("x", as: String.self, context: invalidated)
        }
    }

    @Test("a reuse window gives one prompt for several reads, zero reuse one per read, and no reuse across a TPM reset")
    func reuseWindow() async throws {
        let fixture = try Fixture()
        try await fixture.keychain.set(
            "x", forKey: "x", accessControl: try AccessControl(.whenUnlocked, flags: .biometryAny),
            context: fixture.context())
        let reusing = fixture.context(reuse: .seconds(60))
        for _ in 0..<3 { #expect(try await fixture.keychain.get("x", as: String.self, context: reusing) == "x") }
        #expect(fixture.face.attempts == 1)
        let once = fixture.context()
        for _ in 0..<2 { #expect(try await fixture.keychain.get("x", as: String.self, context: once) == "x") }
        #expect(fixture.face.attempts == 3)
        #expect(reusing.promptCount == 1 && once.promptCount == 2)
        // Locking ends the window: the TPM refuses the record, and the kept key is not used.
        try fixture.device.lock()
        await expectAsyncKeychainError(.interactionNotAllowed) {
            _ = try await fixture.keychain.get("x", as: String.self, context: reusing)
        }
        try fixture.device.unlock(passcode: Self.passcode)
        #expect(try await fixture.keychain.get("x", as: String.self, context: reusing) == "x")
        #expect(reusing.promptCount == 2)
        // A TPM reset (reboot) ends it too: the kept key is dropped (the reset count is checked
        // at most every second), and the TPM refuses the record until the first unlock.
        try fixture.store.simulator.powerCycle()
        try await Task.sleep(for: AuthenticationContext.resetCheckInterval + .milliseconds(100))
        await expectAsyncKeychainError(.interactionNotAllowed) {
            _ = try await fixture.keychain.get("x", as: String.self, context: reusing)
        }
        try fixture.device.unlock(passcode: Self.passcode)
        #expect(try await fixture.keychain.get("x", as: String.self, context: reusing) == "x")
        #expect(reusing.promptCount == 3)
        #expect(AuthenticationContext.maximumReuseDuration == .seconds(300))
        reusing.allowableReuseDuration = .seconds(10_000)
        #expect(reusing.allowableReuseDuration == .seconds(300))
    }

    @Test("the domain state is nil without enrollment, changes with it, and differs between applications")
    func domainState() async throws {
        let fixture = try Fixture(passcode: false)
        let first = await fixture.context(applicationIdentifier: "com.example.a").domainState()
        let other = await fixture.context(applicationIdentifier: "com.example.b").domainState()
        #expect(first != nil && other != nil && first != other)
        fixture.face.unenroll("face")
        fixture.face.enroll("face")
        let after = await fixture.context(applicationIdentifier: "com.example.a").domainState()
        #expect(after != nil && after != first)
        fixture.face.unenroll()
        #expect(await fixture.context().domainState() == nil)
    }

    // MARK: Lock states

    @Test(
        "afterFirstUnlock items are refused after a TPM power cycle until the first unlock; whenUnlocked ones while locked"
    )
    func lockStates() async throws {
        let fixture = try Fixture()
        try await fixture.keychain.set(
            "afu", forKey: "afu", accessControl: try AccessControl(.afterFirstUnlockThisDeviceOnly))
        try await fixture.keychain.set("ak", forKey: "ak", accessControl: try AccessControl(.whenUnlocked))
        try await fixture.keychain.set(
            "always", forKey: "always", accessControl: try AccessControl(.alwaysThisDeviceOnly))
        #expect(try fixture.keychain.get("afu", as: String.self) == "afu")
        #expect(try fixture.keychain.get("ak", as: String.self) == "ak")
        try fixture.device.lock()
        expectKeychainError(.interactionNotAllowed) { _ = try fixture.keychain.get("ak", as: String.self) }
        #expect(try fixture.keychain.get("afu", as: String.self) == "afu")
        try fixture.device.unlock(passcode: Self.passcode)
        #expect(try fixture.keychain.get("ak", as: String.self) == "ak")

        try fixture.store.simulator.powerCycle()
        expectKeychainError(.interactionNotAllowed) { _ = try fixture.keychain.get("afu", as: String.self) }
        expectKeychainError(.interactionNotAllowed) { _ = try fixture.keychain.get("ak", as: String.self) }
        #expect(try fixture.keychain.get("always", as: String.self) == "always")
        #expect(try fixture.device.status().unlockedSinceBoot == false)
        try fixture.device.unlock(passcode: Self.passcode)
        #expect(try fixture.keychain.get("afu", as: String.self) == "afu")
        #expect(try fixture.keychain.get("ak", as: String.self) == "ak")
    }

    @Test(
        "a locked login session refuses whenUnlocked items and ends reuse windows; afterFirstUnlock items stay readable"
    )
    func sessionLock() async throws {
        let fixture = try Fixture()
        let screen = ScreenLock()
        var location = fixture.store.location
        location.sessionLock = screen
        let keychain = try Keychain(service: "com.example.tests", location: location)
        let context = AuthenticationContext(
            authenticator: fixture.face, passcode: .fixed(Self.passcode), location: location)
        context.allowableReuseDuration = .seconds(60)
        try await keychain.set("ak", forKey: "ak", accessControl: try AccessControl(.whenUnlocked))
        try await keychain.set("afu", forKey: "afu", accessControl: try AccessControl(.afterFirstUnlock))
        try await keychain.set(
            "bio", forKey: "bio", accessControl: try AccessControl(.whenUnlockedThisDeviceOnly, flags: .biometryAny),
            context: context)
        #expect(try await keychain.get("bio", as: String.self, context: context) == "bio")
        screen.locked.withLock { $0 = true }
        expectKeychainError(.interactionNotAllowed) { _ = try keychain.get("ak", as: String.self) }
        await expectAsyncKeychainError(.interactionNotAllowed) {
            _ = try await keychain.get("bio", as: String.self, context: context)
        }
        #expect(try keychain.get("afu", as: String.self) == "afu")
        #expect(fixture.face.attempts == 1)
        screen.locked.withLock { $0 = false }
        #expect(try keychain.get("ak", as: String.self) == "ak")
        // The kept key was forgotten when the session locked: one more prompt.
        #expect(try await keychain.get("bio", as: String.self, context: context) == "bio")
        #expect(fixture.face.attempts == 2)
        // A state that cannot be known counts as locked.
        screen.failing.withLock { $0 = true }
        expectKeychainError(.interactionNotAllowed) { _ = try keychain.get("ak", as: String.self) }
    }

    // MARK: Robustness

    @Test("swtpm killed and restarted keeps counters and items; the device uses three NV indices, before and after")
    func killedSimulatorAndNVBudget() async throws {
        let directory = NSTemporaryDirectory() + "tpm-keychain-nv-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var configuration = SoftwareTPM.Configuration()
        configuration.stateDirectory = directory + "/swtpm"
        var simulator = try SoftwareTPM.start(configuration)
        let indicesBefore = try nvIndices(simulator)
        var location = try KeychainLocation(path: directory + "/store", tcti: simulator.tcti)
        location.deviceDirectory = directory + "/device"
        let face = SimulatedAuthenticator()
        let context = AuthenticationContext(authenticator: face, passcode: .fixed(Self.passcode), location: location)
        let keychain = try Keychain(service: "kill", location: location)
        try KeychainDevice(location: location).setPasscode(Self.passcode)
        try await keychain.set(
            "bio", forKey: "bio", accessControl: try AccessControl(.whenUnlocked, flags: .biometryCurrentSet),
            context: context)
        try await keychain.set(
            "pin", forKey: "pin", accessControl: try AccessControl(.whenUnlocked, flags: .devicePasscode),
            context: context)
        let status = try KeychainDevice(location: location).status()
        // The store's own rollback counter is the one other index (in its range).
        let storeCounters: Range<UInt32> = 0x01A0_0000..<0x01C0_0000
        let added = try nvIndices(simulator).subtracting(indicesBefore)
        #expect(added.filter { !storeCounters.contains($0) } == Set(status.nvIndices), "NV indices added: \(added)")
        #expect(added.count == 4 && added.filter { storeCounters.contains($0) }.count == 1)
        // All of them where no one has registered handles (TCG handle registry), outside systemd's.
        #expect(
            added.allSatisfy { (0x0180_0000...0x01BF_FFFF).contains($0) && !(0x0180_0400...0x0180_05FF).contains($0) },
            "\(added)")

        kill(simulator.processID, SIGKILL)
        simulator.stop()
        Keychain.closeStore(location)
        simulator = try SoftwareTPM.start(configuration)
        defer { simulator.stop() }
        var restarted = try KeychainLocation(path: directory + "/store", tcti: simulator.tcti)
        restarted.deviceDirectory = directory + "/device"
        let after = try KeychainDevice(location: restarted).status()
        #expect(after.enrollmentCounter == status.enrollmentCounter && after.passcodeCounter == status.passcodeCounter)
        let again = AuthenticationContext(authenticator: face, passcode: .fixed(Self.passcode), location: restarted)
        let keychainAgain = try Keychain(service: "kill", location: restarted)
        // A kill is an unclean stop: the TPM restarts with its lock state cleared, so unlock first.
        try KeychainDevice(location: restarted).unlock(passcode: Self.passcode)
        #expect(try await keychainAgain.get("bio", as: String.self, context: again) == "bio")
        #expect(try await keychainAgain.get("pin", as: String.self, context: again) == "pin")
        #expect(try nvIndices(simulator).subtracting(indicesBefore).count == 4)
        Keychain.closeStore(restarted)
    }

    @Test(
        "a key record's fields are authenticated: dropping a constraint or moving an item to the master key is tampering"
    )
    func downgradeIsTampering() async throws {
        let fixture = try Fixture()
        try await fixture.keychain.set(
            "x", forKey: "x", accessControl: try AccessControl(.whenUnlocked, flags: .devicePasscode))
        let recordPath = try #require(try fixture.store.files().first { $0.hasSuffix(".key") })
        let original = try bytes(of: recordPath)
        var edited = original
        edited[47] = 0 // access-control flags: devicePasscode cleared
        try overwrite(recordPath, with: edited)
        Keychain.closeStore(fixture.store.location)
        await expectAsyncKeychainError(.tampered) {
            _ = try await fixture.keychain.get("x", as: String.self, context: fixture.context())
        }
        try overwrite(recordPath, with: original)
        let itemPath = try #require(try fixture.store.itemFiles().first)
        var item = try bytes(of: itemPath)
        for offset in 52..<68 { item[offset] = 0 } // the key record ID: the master key
        try overwrite(itemPath, with: item)
        Keychain.closeStore(fixture.store.location)
        expectKeychainError(.tampered) { _ = try fixture.keychain.get("x", as: String.self) }
    }

    @Test("no passcode, authorization value or record key crosses the TPM bus in clear")
    func busCapture() async throws {
        let store = try TestStore()
        let proxy = try RecordingTPMProxy.start(forwardingTo: store.simulator.port)
        defer { proxy.stop() }
        var location = try KeychainLocation(path: store.directory + "/bus", tcti: proxy.tcti)
        location.deviceDirectory = store.directory + "/bus-device"
        defer { Keychain.closeStore(location) }
        let face = SimulatedAuthenticator()
        let context = AuthenticationContext(authenticator: face, passcode: .fixed(Self.passcode), location: location)
        let keychain = try Keychain(service: "bus", location: location)
        try KeychainDevice(location: location).setPasscode(Self.passcode)
        try await keychain.set(
            "secret-value-on-the-bus", forKey: "pin",
            accessControl: try AccessControl(.whenUnlocked, flags: [.devicePasscode]))
        try await keychain.set(
            "another-secret", forKey: "face",
            accessControl: try AccessControl(.whenUnlocked, flags: .biometryCurrentSet), context: context)
        #expect(try await keychain.get("pin", as: String.self, context: context) == "secret-value-on-the-bus")
        #expect(try await keychain.get("face", as: String.self, context: context) == "another-secret")
        let captured = proxy.recordedBytes()
        #expect(captured.count > 1000)
        let passcodeBytes = Self.passcode.withUnsafeBytes { Array($0) }
        #expect(!captured.containsSubsequence(passcodeBytes))
        #expect(!captured.containsSubsequence(Array("secret-value-on-the-bus".utf8)))
        let deviceFile = try DeviceFile.parse(
            try bytes(of: location.deviceDirectory! + "/device.meta"), path: "device.meta"
        ).file
        let authValue = DeviceFile.authValue(passcode: Self.passcode, salt: try #require(deviceFile.passcode).salt)
            .withUnsafeBytes { Array($0) }
        #expect(!captured.containsSubsequence(authValue))
        // Control: the same authorization value, sealed over a connection without parameter
        // encryption, is visible to the same capture, so the check above can fail.
        let control = try RecordingTPMProxy.start(forwardingTo: store.simulator.port)
        defer { control.stop() }
        let clear = try TPMConnection(
            TPMConfiguration(tcti: control.tcti), parameterEncryption: false, storageKeyContextCache: nil)
        defer { clear.close() }
        _ = try clear.seal(
            SecretBytes(copying: [UInt8](repeating: 0x5A, count: 32)), authValue: SecretBytes(copying: authValue))
        #expect(control.recordedBytes().containsSubsequence(authValue))
    }

    private func nvIndices(_ simulator: SoftwareTPM) throws -> Set<UInt32> {
        let result = try TPM2Tools.run(["tpm2_getcap", "handles-nv-index"], tcti: simulator.tcti)
        return Set(
            result.output.split(whereSeparator: \.isNewline).compactMap { line in
                let text = line.trimmingCharacters(in: CharacterSet(charactersIn: "- "))
                return text.hasPrefix("0x") ? UInt32(text.dropFirst(2), radix: 16) : nil
            })
    }
}

/// Asserts that an async `body` throws a ``KeychainError`` with `code`.
@discardableResult
func expectAsyncKeychainError(
    _ code: KeychainError.Code, _ comment: String = "", sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () async throws -> Void
) async -> KeychainError? {
    do {
        try await body()
        Issue.record(
            "expected KeychainError.\(code) \(comment), but nothing was thrown", sourceLocation: sourceLocation)
    } catch let error as KeychainError {
        #expect(error.code == code, "\(comment) got \(error)", sourceLocation: sourceLocation)
        return error
    } catch {
        Issue.record("expected KeychainError.\(code) \(comment), got \(error)", sourceLocation: sourceLocation)
    }
    return nil
}

/// A screen locker the test controls.
final class ScreenLock: SessionLockState {
    let locked = Locked(false)
    let failing = Locked(false)

    func isLocked() throws -> Bool {
        struct Unknown: Error {}
        if failing.withLock({ $0 }) { throw Unknown() }
        return locked.withLock { $0 }
    }
}

extension PurgeReport {
    /// Items, then key records.
    var counts: [Int] { [items, keyRecords] }
}

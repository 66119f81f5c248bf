import Foundation
import SystemCalls
import TPMKeychainTesting
import Testing
import WireFormat

@testable import TPM

@Suite struct ConnectionTests {
    @Test func unreachableTPMsAreReportedWithTheTCTITried() throws {
        for tcti in ["swtpm:host=127.0.0.1,port=1", "device:/dev/tpm-keychain-no-such-device"] {
            do {
                _ = try TPMConnection(TPMConfiguration(tcti: tcti))
                Issue.record("connected to \(tcti)")
            } catch let error as TPMError {
                #expect(error.code == .tpmUnavailable)
                #expect(error.message.contains(tcti))
                // Given in code, not by the environment: the user is not sent to TPM_KEYCHAIN_TCTI.
                #expect(!error.message.contains(TPMConfiguration.environmentVariable), "\(error)")
            }
        }
    }

    @Test("a malformed TCTI is reported as malformed, not as a TPM that did not answer")
    func malformedTCTIsAreSaidToBeMalformed() throws {
        for tcti in ["swtpm:nonsense", "swtpm:port=abc", "no-such-tcti:x"] {
            do {
                _ = try TPMConnection(TPMConfiguration(tcti: tcti))
                Issue.record("connected to \(tcti)")
            } catch let error as TPMError {
                #expect(error.code == .invalidArgument, "\(tcti): \(error)")
                #expect(error.message.contains("malformed"), "\(error)")
                #expect(error.message.contains(tcti))
            }
        }
    }

    @Test func callsAfterCloseThrowConnectionClosed() throws {
        try withSimulator { _, configuration in
            let tpm = try TPMConnection(configuration)
            tpm.close()
            tpm.close()
            expectTPMError(.connectionClosed) { _ = try tpm.randomBytes(count: 8) }
        }
    }

    @Test func describesTheSimulator() throws {
        try withSimulator { simulator, configuration in
            let description = try withConnection(configuration) { try $0.describe() }
            #expect(description.isSimulator)
            #expect(description.manufacturer == "IBM")
            #expect(description.tcti == simulator.tcti)
        }
    }

    @Test("The storage key is the TCG template's: tpm2-tools derives the same name")
    func storageKeyMatchesTheTCGTemplate() throws {
        try withSimulator { simulator, configuration in
            let ours = try withConnection(configuration) { try $0.storageKey() }
            #expect(ours.algorithm == .eccP256)
            let directory = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(atPath: directory) }
            try tool(tcgStorageKeyArguments + ["-c", "srk.ctx"], simulator, in: directory, input: tcgStorageKeyUnique)
            let readPublic = try tool(["tpm2_readpublic", "-c", "srk.ctx"], simulator, in: directory)
            #expect(readPublic.contains("name: " + ours.name.hexString))
            try tool(["tpm2_flushcontext", "-t"], simulator)
        }
    }

    @Test("The RSA-2048 fallback storage key is the TCG L-1 template's: tpm2-tools derives the same name")
    func rsaStorageKeyMatchesTheTCGTemplate() throws {
        try withSimulator { simulator, configuration in
            let name = try withConnection(configuration) { tpm in
                try tpm.withEngine { try $0.storageKey(algorithm: .rsa2048, pinnedName: nil).name }
            }
            let directory = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let arguments = tcgStorageKeyArguments.map { $0 == "ecc256:aes128cfb" ? "rsa2048:aes128cfb" : $0 }
            try tool(arguments + ["-c", "srk.ctx"], simulator, in: directory, input: [UInt8](repeating: 0, count: 256))
            #expect(
                try tool(["tpm2_readpublic", "-c", "srk.ctx"], simulator, in: directory).contains(
                    "name: " + name.hexString))
            try tool(["tpm2_flushcontext", "-t"], simulator)
        }
    }

    @Test("A persistent SRK with the pinned name is used; a foreign key at 0x81000001 is ignored and left alone")
    func persistentStorageKeys() throws {
        try withSimulator { simulator, configuration in
            let (key, sealed) = try withConnection(configuration) { try $0.generateSealedKey() }
            let directory = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(atPath: directory) }

            // Someone else's key (tpm2-tools' default RSA template) at the SRK handle.
            try tool(["tpm2_createprimary", "-C", "o", "-c", "foreign.ctx"], simulator, in: directory)
            try tool(["tpm2_evictcontrol", "-C", "o", "-c", "foreign.ctx", "0x81000001"], simulator, in: directory)
            try tool(["tpm2_flushcontext", "-t"], simulator)
            #expect(try withConnection(configuration) { try $0.unseal(sealed) } == key)
            #expect(try listedHandles("persistent", simulator).contains("0x81000001"))

            // Replace it with the TCG SRK: now the unseal must not derive the key again.
            try tool(["tpm2_evictcontrol", "-C", "o", "-c", "0x81000001"], simulator)
            try tool(tcgStorageKeyArguments + ["-c", "srk.ctx"], simulator, in: directory, input: tcgStorageKeyUnique)
            try tool(["tpm2_evictcontrol", "-C", "o", "-c", "srk.ctx", "0x81000001"], simulator, in: directory)
            try tool(["tpm2_flushcontext", "-t"], simulator)
            let proxy = try RecordingTPMProxy.start(forwardingTo: simulator.port)
            defer { proxy.stop() }
            #expect(try withConnection(TPMConfiguration(tcti: proxy.tcti)) { try $0.unseal(sealed) } == key)
            #expect(!proxy.commandCodes.contains(0x131), "TPM2_CreatePrimary was sent: \(proxy.commandCodes)")
            #expect(try listedHandles("persistent", simulator).contains("0x81000001"))
        }
    }

    @Test("Handles a crashed process left on a TPM without resource manager are flushed on connect")
    func staleHandlesAreFlushed() throws {
        try withSimulator { simulator, configuration in
            let directory = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(atPath: directory) }
            // tpm2-tools leave these loaded: all three of swtpm's object slots, and a session.
            for name in ["a", "b", "c"] {
                try tool(["tpm2_createprimary", "-C", "o", "-G", "ecc", "-c", "\(name).ctx"], simulator, in: directory)
            }
            try tool(["tpm2_startauthsession", "-S", "session.ctx"], simulator, in: directory)
            #expect(try listedHandles("transient", simulator).count == 3)
            let (key, sealed) = try withConnection(configuration) { tpm in
                let generated = try tpm.generateSealedKey()
                #expect(try tpm.unseal(generated.sealed) == generated.key)
                return generated
            }
            #expect(key.count == 32 && sealed.privateArea.count > 0)
            #expect(try listedHandles("transient", simulator).isEmpty)
            #expect(try listedHandles("loaded-session", simulator).isEmpty)
            #expect(try listedHandles("saved-session", simulator).isEmpty)
        }
    }

    @Test("200 connect/seal/unseal/close cycles leave the TPM with nothing loaded")
    func repeatedCyclesDoNotLeakHandles() throws {
        try withSimulator { simulator, configuration in
            for cycle in 0..<200 {
                let secret = SecretBytes(copying: distinctSecret(UInt8(truncatingIfNeeded: cycle)))
                let unsealed = try withConnection(configuration) { tpm in try tpm.unseal(tpm.seal(secret)) }
                #expect(unsealed == secret)
            }
            #expect(try listedHandles("transient", simulator).isEmpty)
            #expect(try listedHandles("loaded-session", simulator).isEmpty)
        }
    }

    @Test("Error paths flush too: failed unseals leave nothing loaded")
    func errorPathsDoNotLeakHandles() throws {
        try withSimulator { simulator, configuration in
            // swtpm locks out after 3 failures by default; this test is about handles, not lockout.
            try simulator.setDictionaryAttackParameters(maxTries: 1000, recoveryTime: 0, lockoutRecovery: 0)
            try withConnection(configuration) { tpm in
                let pin = SecretBytes(copying: Array("pin".utf8))
                let sealed = try tpm.seal(SecretBytes(copying: [1]), authValue: pin)
                // More failures than swtpm has object (3) or session slots.
                for _ in 0..<10 {
                    expectTPMError(.authorizationFailed) {
                        _ = try tpm.unseal(sealed, authValue: SecretBytes(copying: [9]))
                    }
                }
                #expect(try tpm.unseal(sealed, authValue: pin).bytes == [1])
            }
            #expect(try listedHandles("transient", simulator).isEmpty)
            #expect(try listedHandles("loaded-session", simulator).isEmpty)
        }
    }

    @Test(
        "A connection starts one salted session and keeps it for every command that carries a secret, then flushes it: nothing stays loaded"
    )
    func oneSaltedSessionPerConnection() throws {
        try withRecordingProxy { proxy, configuration, simulator in
            let nvAuth = SecretBytes(copying: Array("nv auth".utf8))
            try withConnection(configuration) { tpm in
                let (key, sealed) = try tpm.generateSealedKey()
                #expect(try tpm.unseal(sealed) == key)
                try tpm.defineNVIndex(0x0150_0030, kind: .ordinary(size: 8), authValue: nvAuth)
                try tpm.writeNV(0x0150_0030, data: SecretBytes(copying: [1, 2, 3, 4, 5, 6, 7, 8]), authValue: nvAuth)
                #expect(try tpm.readNV(0x0150_0030, count: 8, authValue: nvAuth).bytes == [1, 2, 3, 4, 5, 6, 7, 8])
                _ = try tpm.randomBytes(count: 16)
                try tpm.undefineNVIndex(0x0150_0030)
            }
            let sessionsStarted = proxy.commandCodes.filter { $0 == 0x176 }.count // TPM2_StartAuthSession
            #expect(sessionsStarted == 1, "\(proxy.commandCodes.map(RecordingTPMProxy.commandName))")
            #expect(try listedHandles("loaded-session", simulator).isEmpty)
            #expect(try listedHandles("transient", simulator).isEmpty)
        }
    }

    @Test("One connection is safe to share between concurrent tasks", .tags(.concurrency))
    func concurrentTasksShareAConnection() async throws {
        let simulator = try SoftwareTPM.start()
        defer { simulator.stop() }
        let tpm = try TPMConnection(TPMConfiguration(tcti: simulator.tcti))
        defer { tpm.close() }
        let sealed = try (0..<4).map { index in
            let secret = SecretBytes(copying: distinctSecret(UInt8(index)))
            return (secret, try tpm.seal(secret))
        }
        try await withThrowingTaskGroup(of: Bool.self) { group in
            for task in 0..<8 {
                group.addTask {
                    var allMatched = true
                    for round in 0..<10 {
                        let (secret, object) = sealed[(task + round) % sealed.count]
                        let unsealed = try tpm.unseal(object)
                        allMatched = allMatched && unsealed == secret
                    }
                    return allMatched
                }
            }
            for try await matched in group { #expect(matched) }
        }
    }

    @Test("Connections from several threads to one swtpm take turns through the access lock", .tags(.concurrency))
    func concurrentConnectionsAreSerialised() async throws {
        let simulator = try SoftwareTPM.start()
        defer { simulator.stop() }
        let configuration = TPMConfiguration(tcti: simulator.tcti)
        try await withThrowingTaskGroup(of: Bool.self) { group in
            for worker in 0..<4 {
                group.addTask {
                    var allMatched = true
                    for round in 0..<5 {
                        let secret = SecretBytes(copying: distinctSecret(UInt8(worker * 16 + round)))
                        let unsealed = try withConnection(configuration) { tpm in try tpm.unseal(tpm.seal(secret)) }
                        allMatched = allMatched && unsealed == secret
                    }
                    return allMatched
                }
            }
            for try await matched in group { #expect(matched) }
        }
        #expect(try listedHandles("transient", simulator).isEmpty)
    }

    @Test(
        "The TCTI loader is given the library's file name once it is loaded for good; names it cannot load, paths and the default are passed on unchanged"
    )
    func tctiLibrariesStayLoaded() {
        #expect(
            TCTILibraries.loaderConfiguration(for: "swtpm:host=127.0.0.1,port=2321")
                == "libtss2-tcti-swtpm.so.0:host=127.0.0.1,port=2321")
        #expect(TCTILibraries.loaderConfiguration(for: "device:/dev/tpmrm0") == "libtss2-tcti-device.so.0:/dev/tpmrm0")
        #expect(TCTILibraries.loaderConfiguration(for: "swtpm") == "libtss2-tcti-swtpm.so.0")
        for unchanged in [
            "", "no-such-tcti:x", "libtss2-tcti-mssim.so.0:port=2321",
            "/usr/lib/x86_64-linux-gnu/libtss2-tcti-swtpm.so.0:",
        ] {
            #expect(TCTILibraries.loaderConfiguration(for: unchanged) == unchanged)
        }
        // RTLD_NOLOAD finds it only if it is loaded: it stays so after the loader's dlclose.
        #expect(dlopen("libtss2-tcti-swtpm.so.0", RTLD_NOW | RTLD_NOLOAD) != nil)
    }

    @Test("A TPM lock directory removed while the process runs (a runtime directory at logout) is made again")
    func removedLockDirectoryIsMadeAgain() throws {
        let simulator = try SoftwareTPM.start()
        defer { simulator.stop() }
        let root = NSTemporaryDirectory() + "tpm-lock-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: root) }
        let configuration = TPMConfiguration(tcti: simulator.tcti, lockDirectory: root + "/locks")
        #expect(try withConnection(configuration) { try $0.randomBytes(count: 8) }.count == 8)
        try FileManager.default.removeItem(atPath: root)
        #expect(try withConnection(configuration) { try $0.randomBytes(count: 8) }.count == 8)
        var info = stat()
        #expect(stat(root + "/locks", &info) == 0 && info.st_mode & 0o777 == 0o700)
    }

    @Test("A stopped simulator's TPM access lock file is removed: each test's simulator left one behind for good")
    func stoppedSimulatorsLeaveNoLockFile() throws {
        let simulator = try SoftwareTPM.start()
        let configuration = TPMConfiguration(tcti: simulator.tcti)
        let path = TPMAccessLock.path(tcti: simulator.tcti, in: configuration.lockDirectory)
        #expect(try withConnection(configuration) { try $0.randomBytes(count: 8) }.count == 8)
        #expect(access(path, F_OK) == 0, "the connection made \(path)")
        simulator.stop()
        #expect(access(path, F_OK) != 0, "\(path) is still there")
    }

    @Test(
        "Stale lock files go: only tcti-*.lock regular files untouched for the given age that nobody holds; recent, held and other files stay"
    )
    func staleLockFilesAreRemoved() throws {
        let root = NSTemporaryDirectory() + "tpm-lock-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: root) }
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        func make(_ name: String, daysOld: Int) throws -> String {
            let path = root + "/" + name
            #expect(FileManager.default.createFile(atPath: path, contents: Data("C".utf8)))
            let old = Date().addingTimeInterval(-Double(daysOld) * 86_400)
            try FileManager.default.setAttributes([.modificationDate: old], ofItemAtPath: path)
            return path
        }
        let stale = try make("tcti-000000000000000000000001.lock", daysOld: 8)
        let recent = try make("tcti-000000000000000000000002.lock", daysOld: 1)
        let held = try make("tcti-000000000000000000000003.lock", daysOld: 8)
        let other = try make("notes.lock", daysOld: 8)
        #expect(symlink(stale + ".target", root + "/tcti-000000000000000000000004.lock") == 0)
        let holder = try LockFile(held)
        #expect(try holder.lock(wait: false))
        #expect(TPMAccessLock.removeStale(in: root, olderThan: .seconds(7 * 86_400)) == 1)
        #expect(access(stale, F_OK) != 0)
        for kept in [recent, held, other] { #expect(access(kept, F_OK) == 0, "\(kept)") }
        var status = stat()
        #expect(lstat(root + "/tcti-000000000000000000000004.lock", &status) == 0)
        withExtendedLifetime(holder) {}
    }

    @Test(
        "A connection that waited for a lock file which was removed meanwhile takes the lock of the file there now, so it still excludes the others"
    )
    func lockOnARemovedFileIsTakenAgain() throws {
        let root = NSTemporaryDirectory() + "tpm-lock-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: root) }
        let configuration = TPMConfiguration(
            tcti: "swtpm:host=127.0.0.1,port=1", lockDirectory: root, timeout: .seconds(120))
        let path = TPMAccessLock.path(tcti: configuration.tcti, in: root)
        var first: TPMAccessLock? = try TPMAccessLock(configuration: configuration)
        // The waiter gets a thread of its own: it blocks while it polls for the lock, and on the
        // cooperative pool of a two-core machine it could starve this test's own progress.
        let outcome = Locked<Result<Bool, TPMError>?>(nil)
        let waiter = try JoinableThread {
            let result = Result(catching: { () throws(TPMError) -> Bool in
                let second = try TPMAccessLock(configuration: configuration)
                // The waiter holds the file at the path now: a third cannot lock it.
                let third = try? LockFile(path)
                let excluded = (try? third?.lock(wait: false)) == false
                withExtendedLifetime(second) {}
                return excluded
            })
            outcome.withLock { $0 = result }
        }
        // Progress, not a fixed wait: the waiter has the lock file open too (it polls for the
        // lock), or it has already given up.
        func openCount() -> Int {
            let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
            return entries.filter {
                (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + $0)) == path
            }.count
        }
        while openCount() < 2 && outcome.withLock({ $0 == nil ? true : false }) { usleep(1000) }
        // Removed while held and waited for, as removeUnused never does but a user could.
        #expect(unlink(path) == 0)
        withExtendedLifetime(first) {}
        first = nil
        waiter.join()
        let excluded = try #require(outcome.withLock { $0 }).get()
        #expect(excluded, "the waiter locked the removed file and excludes nobody")
    }

    @Test(
        "Without a resource manager, a connection sweeps stale handles unless the access lock's last holder closed cleanly; one that was abandoned, as by a process that died, makes the next sweep"
    )
    func sweepOnlyAfterAnUncleanClose() throws {
        try withRecordingProxyAndOwnLock { proxy, configuration, simulator, _ in
            let getCapability: UInt32 = 0x17A
            func commands(_ body: () throws -> Void) rethrows -> [UInt32] {
                let before = proxy.commandCodes.count
                try body()
                return Array(proxy.commandCodes[before...])
            }
            // No note yet: the first holder sweeps.
            #expect(
                try commands { _ = try withConnection(configuration) { try $0.randomBytes(count: 8) } }.first
                    == getCapability)
            // Closed cleanly: the next asks the TPM nothing about what is loaded.
            let second = try commands { _ = try withConnection(configuration) { try $0.randomBytes(count: 8) } }
            #expect(
                second.contains(0x17B) && !second.contains(getCapability),
                "\(second.map(RecordingTPMProxy.commandName))")
            // A connection that dies with its storage key loaded and writes no note.
            let (key, sealed) = try withConnection(configuration) { try $0.generateSealedKey() }
            let dying = try TPMConnection(configuration)
            #expect(try dying.unseal(sealed) == key)
            dying.abandonForTesting()
            #expect(try listedHandles("transient", simulator).count == 1)
            var unsealed: SecretBytes?
            let afterDeath = try commands { unsealed = try withConnection(configuration) { try $0.unseal(sealed) } }
            #expect(unsealed == key)
            #expect(afterDeath.first == getCapability)
            #expect(try listedHandles("transient", simulator).isEmpty)
            #expect(try listedHandles("loaded-session", simulator).isEmpty)
        }
    }

    @Test(
        "After a clean close, what a program that takes no lock left (tpm2-tools) is swept once a command finds the TPM full, and the command succeeds; this connection's own handles stay"
    )
    func leftoversOfOtherProgramsAreSweptWhenTheTPMIsFull() throws {
        try withRecordingProxyAndOwnLock { proxy, configuration, simulator, directory in
            let (key, sealed) = try withConnection(configuration) { try $0.generateSealedKey() }
            // tpm2-tools leave these loaded: all three of swtpm's object slots, and a session.
            for name in ["a", "b", "c"] {
                try tool(["tpm2_createprimary", "-C", "o", "-G", "ecc", "-c", "\(name).ctx"], simulator, in: directory)
            }
            try tool(["tpm2_startauthsession", "-S", "session.ctx"], simulator, in: directory)
            #expect(try listedHandles("transient", simulator).count == 3)
            let before = proxy.commandCodes.count
            // The storage key's load finds no slot; the unseal then needs the loaded key kept.
            #expect(try withConnection(configuration) { try $0.unseal(sealed) } == key)
            let sent = proxy.commandCodes[before...]
            #expect(sent.first != 0x17A, "swept at connect: \(sent.map(RecordingTPMProxy.commandName))")
            #expect(sent.contains(0x17A), "never swept: \(sent.map(RecordingTPMProxy.commandName))")
            #expect(try listedHandles("transient", simulator).isEmpty)
            #expect(try listedHandles("loaded-session", simulator).isEmpty)
        }
    }

    @Test(
        "The device TCTI's descriptor is close-on-exec: a child the process starts does not inherit the connection to the TPM"
    )
    func deviceDescriptorIsCloseOnExec() throws {
        // A FIFO stands in for /dev/tpmrm0: the device TCTI's start writes one command and reads
        // an answer back, which here is its own command, and that is all it checks. Behind a
        // resource manager the connection sends nothing more until it is used.
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let device = directory + "/tpm"
        #expect(mkfifo(device, 0o600) == 0)
        let connection = try TPMConnection(TPMConfiguration(tcti: "device:" + device, hasResourceManager: true))
        defer { connection.close() }
        let descriptors = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").compactMap(Int32.init)
            .filter { (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\($0)")) == device }
        #expect(descriptors.count == 1)
        for descriptor in descriptors { #expect(fcntl(descriptor, F_GETFD) & FD_CLOEXEC != 0) }
    }
}

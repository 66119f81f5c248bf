import Foundation
import KeychainStorageCompat
import StressProcess
import SystemCalls
import TPMKeychain
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Every store of this test process lives under one private root; each test uses its own names.
/// The stores get simulated TPMs of their own (as the CLI gives them on a machine without a TPM).
let storageRoot: String = {
    let root = NSTemporaryDirectory() + "tpm-keychain-storage-tests-" + UUID().uuidString
    KeychainStorage.rootDirectory = root
    // No hardware TPM on the test machines: the stores get simulated TPMs of their own, as allowed here.
    KeychainStorage.allowsSimulatedTPM = true
    return root
}()

/// Light scrypt parameters: the tests make many ciphers.
let light = Cipher.Parameters(rounds: 1 << 10, blockSize: 8, parallelism: 1)

func cipher(_ password: String) throws -> Cipher {
    try Cipher(password: password, salt: Data("salt".utf8), parameters: light)
}

func uniqueName(_ prefix: String) -> String {
    _ = storageRoot
    return prefix + "-" + UUID().uuidString.prefix(8)
}

@Suite struct KeychainStorageTests {
    @Test(
        "SAP's documented usage: create, put, read, keys, remove data, remove all, change cipher, open, remove the store"
    )
    func documentedUsage() throws {
        let name = uniqueName("usage")
        let storage = try KeychainStorage.createStore(name: name, cipher: try cipher("first"), accessGroup: "")
        #expect(storage.name == name && storage.accessGroup == "")
        try storage.put(data: Data("alpha".utf8), for: "a")
        try storage.put(data: Data("beta".utf8), for: "b")
        try storage.put(data: Data("beta 2".utf8), for: "b")
        #expect(try storage.data(for: "a") == Data("alpha".utf8))
        #expect(try storage.data(for: "b") == Data("beta 2".utf8))
        #expect(try storage.data(for: "missing") == nil)
        #expect(try storage.keys() == ["a", "b"])
        try storage.removeData(for: "a")
        try storage.removeData(for: "a") // removing what is not there is no error
        #expect(try storage.keys() == ["b"])

        try storage.changeCipher(to: try cipher("second"))
        #expect(try storage.data(for: "b") == Data("beta 2".utf8))
        Keychain.closeStore(try KeychainLocation(path: storageRoot + "/private/" + name))
        #expect(throws: KeychainStorageError.self) {
            _ = try KeychainStorage.openStore(name: name, cipher: try cipher("first"))
        }
        let reopened = try KeychainStorage.openStore(name: name, cipher: try cipher("second"))
        #expect(try reopened.data(for: "b") == Data("beta 2".utf8))
        try reopened.removeAllData()
        #expect(try reopened.keys().isEmpty)

        #expect(try KeychainStorage.storeExists(name: name))
        try KeychainStorage.removeStore(name: name)
        #expect(try !KeychainStorage.storeExists(name: name))
        #expect(throws: KeychainStorageError.storeRemoved("The store \"\(name)\" was removed")) {
            try reopened.put(data: Data(), for: "x")
        }
        #expect(throws: KeychainStorageError.storeNotFound(name)) {
            _ = try KeychainStorage.openStore(name: name, cipher: try cipher("second"))
        }
    }

    @Test("each documented failure has its error: an existing store, a missing one, invalid names, a wrong cipher")
    func failures() throws {
        let name = uniqueName("failures")
        _ = try KeychainStorage.createStore(name: name, cipher: try cipher("right"))
        #expect(throws: KeychainStorageError.storeAlreadyExists(name)) {
            _ = try KeychainStorage.createStore(name: name)
        }
        let missing = uniqueName("missing")
        #expect(throws: KeychainStorageError.storeNotFound(missing)) {
            _ = try KeychainStorage.openStore(name: missing)
        }
        #expect(throws: KeychainStorageError.storeNotFound(missing)) { try KeychainStorage.removeStore(name: missing) }
        for bad in ["", ".", "..", "a/b", "nul\0byte", "../escape"] {
            #expect(throws: KeychainStorageError.self, "\(bad)") { _ = try KeychainStorage.createStore(name: bad) }
            #expect((try? KeychainStorage.storeExists(name: bad)) == nil, "\(bad)")
        }
        // A wrong password is its own error, told apart from damage by the verifier.
        do {
            _ = try KeychainStorage.openStore(name: name, cipher: try cipher("wrong"))
            Issue.record("a wrong cipher opened the store")
        } catch let error as KeychainStorageError {
            guard case .wrongCipher = error else {
                Issue.record("got \(error)")
                return
            }
        }
        // The right password with other scrypt parameters: the store recorded its own, and says which.
        do {
            let other = try Cipher(
                password: "right", salt: Data("salt".utf8),
                parameters: .init(rounds: 1 << 11, blockSize: 8, parallelism: 1))
            _ = try KeychainStorage.openStore(name: name, cipher: other)
            Issue.record("a cipher with other parameters opened the store")
        } catch let error as KeychainStorageError {
            guard case .wrongCipher(let message) = error else {
                Issue.record("got \(error)")
                return
            }
            #expect(message.contains("N = \(light.rounds)") && message.contains("N = \(1 << 11)"), "\(message)")
        }
        #expect(throws: KeychainStorageError.self) { _ = try KeychainStorage.openStore(name: name) }
        #expect(throws: KeychainStorageError.self) { _ = try Cipher(password: "", salt: "salt") }
        try KeychainStorage.removeStore(name: name)
    }

    @Test("access groups are separate namespaces; removing one store leaves the others")
    func accessGroupsAndRemoval() throws {
        let name = uniqueName("shared")
        let own = try KeychainStorage.createStore(name: name)
        let shared = try KeychainStorage.createStore(
            name: name, accessGroup: KeychainStorage.accessGroup(from: "group.com.example"))
        try own.put(data: Data("own".utf8), for: "k")
        try shared.put(data: Data("shared".utf8), for: "k")
        #expect(try own.data(for: "k") == Data("own".utf8) && shared.data(for: "k") == Data("shared".utf8))
        #expect(try KeychainStorage.storeNames(accessGroup: "group.com.example").contains(name))
        try KeychainStorage.removeStore(name: name, accessGroup: "group.com.example")
        #expect(try own.data(for: "k") == Data("own".utf8))
        #expect(try !KeychainStorage.storeNames(accessGroup: "group.com.example").contains(name))
        try KeychainStorage.removeStore(name: name)
    }

    @Test("values are encrypted with the cipher on top of the store: the store alone does not give them")
    func cipherIsASecondKey() throws {
        let name = uniqueName("second-key")
        let storage = try KeychainStorage.createStore(name: name, cipher: try cipher("pw"))
        try storage.put(data: Data("the clear value".utf8), for: "k")
        // The TPM store's own view holds the cipher's output, not the value.
        let keychain = try Keychain(
            service: "KeychainStorage.g1",
            location: try KeychainLocation(path: storageRoot + "/private/" + name, tpm: .automaticOrSimulated))
        let raw = try #require(try keychain.data(forKey: "k"))
        #expect(raw != Data("the clear value".utf8) && raw.count == "the clear value".utf8.count + 28)
        try KeychainStorage.removeStore(name: name)
    }

    @Test("8 threads doing 1,000 mixed operations on one store lose nothing", .tags(.concurrency))
    func threads() throws {
        let name = uniqueName("threads")
        let storage = try KeychainStorage.createStore(name: name, cipher: try cipher("pw"))
        let problems = Locked<[String]>([])
        DispatchQueue.concurrentPerform(iterations: 8) { thread in
            var expected: [String: Data] = [:]
            for step in 0..<1000 {
                let key = "t\(thread)-k\(step % 20)"
                do {
                    switch step % 5 {
                    case 0, 1:
                        let value = Data("t\(thread)-\(step)".utf8)
                        try storage.put(data: value, for: key)
                        expected[key] = value
                    case 2, 3:
                        if try storage.data(for: key) != expected[key] {
                            problems.withLock { $0.append("\(key) at \(step)") }
                        }
                    default:
                        try storage.removeData(for: key)
                        expected[key] = nil
                    }
                } catch {
                    problems.withLock { $0.append("\(key): \(error)") }
                }
            }
            for (key, value) in expected where (try? storage.data(for: key)) != value {
                problems.withLock { $0.append("\(key) lost") }
            }
        }
        #expect(problems.withLock { $0 }.isEmpty, "\(problems.withLock { $0 }.prefix(5))")
        try KeychainStorage.removeStore(name: name)
    }

    @Test(
        "without a usable TPM a store is created under a simulated one only when TPM_KEYCHAIN_ALLOW_SIMULATED=1 says so; otherwise the error says what to do and nothing is created",
        .enabled(
            if: access("/dev/tpmrm0", R_OK | W_OK) != 0
                && ProcessInfo.processInfo.environment["TPM_KEYCHAIN_TCTI"] == nil,
            "a TPM is usable here"))
    func simulatedOnlyWhenAllowed() throws {
        let name = uniqueName("simulated")
        var environment = ProcessInfo.processInfo.environment
        environment.removeValue(forKey: "TPM_KEYCHAIN_ALLOW_SIMULATED")
        func create(_ environment: [String: String]) throws -> (status: Int32, error: String) {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: StressProcess.executable)
            process.arguments = ["--storage-root", storageRoot, "--store", name, "--create"]
            process.environment = environment
            let errors = Pipe()
            process.standardError = errors
            process.standardOutput = FileHandle.nullDevice
            try process.run()
            let text = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            return (process.terminationStatus, text)
        }
        let refused = try create(environment)
        #expect(
            refused.status != 0 && refused.error.contains("TPM_KEYCHAIN_ALLOW_SIMULATED=1")
                && refused.error.contains("group tss"), "\(refused)")
        #expect(try !KeychainStorage.storeExists(name: name))
        environment["TPM_KEYCHAIN_ALLOW_SIMULATED"] = "1"
        let created = try create(environment)
        #expect(created.status == 0, "\(created)")
        #expect(try KeychainStorage.storeExists(name: name))
        try KeychainStorage.removeStore(name: name)
    }

    @Test(
        "a cipher change of a 1,000-item store killed 100 times: every item reads with exactly one of the two ciphers")
    func killedCipherChanges() throws {
        let name = uniqueName("killed")
        var password = "password-0"
        let storage = try KeychainStorage.createStore(name: name, cipher: try cipher(password))
        for index in 0..<1000 { try storage.put(data: Data("value-\(index)".utf8), for: "key-\(index)") }
        var killedBeforeCommit = 0
        var killedAfterCommit = 0
        var finished = 0
        for round in 0...100 {
            let next = "password-\(round + 1)"
            // Round 0 runs to the end; the others are killed where KillPoint says, on both sides of the commit.
            let killPoint = round == 0 ? nil : KillPoint.forRound(round, items: 1000)
            let stress = try StressProcess(
                ["--storage-root", storageRoot, "--store", name, "--change-cipher", password, next]
                    + (killPoint?.arguments ?? []))
            if let killPoint, stress.waitFor(killPoint.line) { stress.kill() }
            let output = stress.finish()

            // Exactly one of the two ciphers opens the store, and every item reads with it.
            let location = try KeychainLocation(path: storageRoot + "/private/" + name, tpm: .automaticOrSimulated)
            Keychain.closeStore(location)
            let oldOpen = Result { try KeychainStorage.openStore(name: name, cipher: try cipher(password)) }
            let newOpen = Result { try KeychainStorage.openStore(name: name, cipher: try cipher(next)) }
            let withOld = try? oldOpen.get()
            let withNew = try? newOpen.get()
            #expect(
                (withOld == nil) != (withNew == nil),
                "round \(round) (\(killPoint?.line ?? "to the end")): old \(oldOpen), new \(newOpen)")
            guard let opened = withNew ?? withOld else { break }
            if withNew != nil {
                password = next
                if output.contains("done") { finished += 1 } else { killedAfterCommit += 1 }
            } else {
                killedBeforeCommit += 1
            }
            let keys = try opened.keys()
            #expect(keys.count == 1000, "round \(round): \(keys.count) keys")
            for index in stride(from: round % 10, to: 1000, by: 10) {
                #expect(
                    try opened.data(for: "key-\(index)") == Data("value-\(index)".utf8), "round \(round), key-\(index)")
            }
        }
        #expect(killedBeforeCommit + killedAfterCommit + finished == 101)
        print(
            "cipher changes: \(killedBeforeCommit) killed before the commit, \(killedAfterCommit) after it, \(finished) finished"
        )
        #expect(killedBeforeCommit > 0 && killedAfterCommit + finished > 1)
        try KeychainStorage.removeStore(name: name)
    }
}

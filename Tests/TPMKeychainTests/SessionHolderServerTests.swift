import Foundation
import KeychainService
import KeychainVocabulary
import SystemCalls
import TPMKeychain
import TPMKeychainTesting
import TPMSimulator
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A session holder run inside a process that has other work (this test bundle, a program that
/// embeds it): a lock or its stop erases the keys of the stores it answered from, and leaves the
/// process's other stores open. It used to close every store of the process, which closed other
/// tests' stores under them.
@Suite struct SessionHolderServerTests {
    @Test(
        "stopping a holder closes the stores it answered from and no other: another store of the process still reads with its TPM gone"
    )
    func stopClosesOnlyWhatItServed() throws {
        let other = try TestStore()
        let served = try TestStore()
        let otherKeychain = try other.keychain("kept")
        try otherKeychain.set("still open", forKey: "item")
        try Keychain(service: "face", location: served.location).set("warm", forKey: "item")

        let socket = served.directory + "/session.socket"
        let holder = try SessionHolderServer(socketPath: socket, log: { _ in })
        let serving = try JoinableThread { holder.serve() }
        let probed = try CommandBudgetTests.probe(
            ["keychain", "string(forKey:)", "--keychain", served.location.path, "--tcti", served.simulator.tcti],
            holder: socket)
        #expect(probed == "allowed\n")
        holder.stop()
        serving.join()

        // With both TPMs gone, only a store still open in memory can answer.
        other.simulator.stop()
        served.simulator.stop()
        #expect(try otherKeychain.string(forKey: "item") == "still open")
        #expect(throws: KeychainError.self) {
            _ = try Keychain(service: "face", location: served.location).string(forKey: "item")
        }
    }
}

/// What a client of the holder cannot do to it: keep its keys past a lock by a read whose TPM
/// never answers, keep its places by staying silent, or crash itself with a name too long for
/// a request.
@Suite struct SessionHolderHostileClientTests {
    @Test(
        "a lock does not wait for a read whose TPM never answers: it returns while the read waits, and the read then answers cold"
    )
    func lockDoesNotWaitForAHungRead() throws {
        let store = try TestStore()
        try Keychain(service: "face", location: store.location).set("warm", forKey: "item")
        let silent = try SilentTPM()
        defer { silent.stop() }
        let holder = try SessionHolderServer(socketPath: store.directory + "/session.socket", log: { _ in })
        defer { holder.stop() }
        let target = HolderRequest.HolderStore(
            path: store.location.path, tcti: silent.tcti, deviceDirectory: store.location.deviceDirectory,
            face: .keychain, accessGroups: nil)
        let request = HolderRequest.value(target, try ItemIdentity(accessGroup: "", service: "face", account: "item"))

        let answer = Locked<HolderResponse?>(nil)
        let reader = try JoinableThread {
            let response = holder.respond(to: request, uid: getuid(), executable: nil)
            answer.withLock { $0 = response }
        }
        // The read has reached the TPM, which will not answer until it is stopped.
        try waitFor("the read to connect to the TPM") { silent.connections > 0 }
        let locked = DispatchSemaphore(value: 0)
        let locker = try JoinableThread {
            _ = holder.respond(to: .lock, uid: getuid(), executable: nil)
            locked.signal()
        }
        // The read waits for up to the TPM timeout (30 s); a lock behind it would wait as long.
        #expect(locked.wait(timeout: .now() + 20) == .success, "the lock waited for the read")
        #expect(answer.withLock { $0 } == nil, "the read ended before its TPM answered")

        silent.stop() // the TPM hangs up: the read fails
        reader.join()
        locker.join()
        guard case .cold = answer.withLock({ $0 }) else {
            Issue.record("a read overtaken by a lock answered \(String(describing: answer.withLock { $0 }))")
            return
        }
    }

    @Test("a stopped holder answers nothing again, even after an unlock on a connection still open")
    func stoppedForGood() throws {
        let store = try TestStore()
        try Keychain(service: "face", location: store.location).set("warm", forKey: "item")
        let holder = try SessionHolderServer(socketPath: store.directory + "/session.socket", log: { _ in })
        let target = HolderRequest.HolderStore(
            path: store.location.path, tcti: store.simulator.tcti, deviceDirectory: store.location.deviceDirectory,
            face: .keychain, accessGroups: nil)
        let request = HolderRequest.value(target, try ItemIdentity(accessGroup: "", service: "face", account: "item"))
        guard case .value(let value?) = holder.respond(to: request, uid: getuid(), executable: nil) else {
            Issue.record("a running holder did not answer")
            return
        }
        #expect(value.bytes == Array("warm".utf8))
        holder.stop()
        #expect(holder.respond(to: .unlock, uid: getuid(), executable: nil) == .done)
        guard case .cold = holder.respond(to: request, uid: getuid(), executable: nil) else {
            Issue.record("a stopped holder answered a read")
            return
        }
    }

    @Test(
        "clients that connect and say nothing are let go after the wait limit, and a full house of them locks nobody out"
    )
    func silentClientsAreLetGo() throws {
        let directory = try temporaryDirectory("silent")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let socket = directory + "/session.socket"
        let holder = try SessionHolderServer(socketPath: socket, clientWaitLimitSeconds: 1, log: { _ in })
        let serving = try JoinableThread { holder.serve() }
        defer {
            holder.stop()
            serving.join()
        }
        let owner = UInt32(geteuid())
        let silent = try (0..<SessionHolderServer.connectionLimit).map { _ in
            try connectToOwnedSocket(socket, owner: owner, timeoutSeconds: 60)
        }
        defer { for connection in silent { close(connection) } }
        // Each one is closed by the holder: a read sees the end of the stream, not its own timeout.
        for connection in silent {
            var byte: UInt8 = 0
            guard read(connection, &byte, 1) == 0 else {
                Issue.record("a silent client kept its place")
                return
            }
        }
        let connection = try connectToOwnedSocket(socket, owner: owner, timeoutSeconds: 60)
        defer { close(connection) }
        try sendAll(connection, OwnerSocketServer.framed(HolderRequest.unlock.encoded))
        let body = try #require(OwnerSocketServer.readMessage(connection, maximumLength: HolderResponse.maximumLength))
        #expect(try HolderResponse(parsing: body) == .done)
    }

    @Test(
        "a store no request can carry (a 70,000-byte path, an access group over 4,096 bytes) takes the cold path and a typed error, not a crash"
    )
    func overlongNamesGoCold() throws {
        let caller = AccessCaller(face: .keychain)
        let long = try KeychainLocation(path: "/" + String(repeating: "a", count: 70_000))
        #expect(SessionHolder.store(for: long, caller: caller) == nil ? true : false, "a 70,000-byte path was sent")
        let grouped = AccessCaller(face: .keychain, accessGroups: [String(repeating: "g", count: 4_097)])
        let normal = try KeychainLocation(path: "/tmp/keychain")
        #expect(SessionHolder.store(for: normal, caller: grouped) == nil ? true : false, "a 4,097-byte group was sent")
        #expect(SessionHolder.store(for: normal, caller: caller) != nil)

        // Through a program with a holder running: the face's own error, where the request used to trap.
        let directory = try temporaryDirectory("long")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let socket = directory + "/session.socket"
        let holder = try SessionHolderServer(socketPath: socket, log: { _ in })
        let serving = try JoinableThread { holder.serve() }
        defer {
            holder.stop()
            serving.join()
        }
        let probed = try CommandBudgetTests.probe(
            ["keychain", "string(forKey:)", "--keychain", long.path, "--tcti", "swtpm:host=127.0.0.1,port=1"],
            holder: socket)
        #expect(probed.hasPrefix("refused "), "\(probed)")
    }

    @Test("an answer is encoded into one buffer of its exact length: no grown copy of its secrets is left behind")
    func answersAreSizedOnce() throws {
        var attributes = AttributeList()
        attributes.setString("svc", for: AttributeTag.service)
        attributes.setString("acct", for: AttributeTag.account)
        let result = ItemQueryResult(
            reference: [1, 2, 3], itemClass: .genericPassword, attributes: attributes, accessibility: .whenUnlocked,
            kind: .string, value: Array(repeating: 7, count: 3000))
        let responses: [HolderResponse] = [
            .value(ItemValue(kind: .data, bytes: Array(repeating: 9, count: 5000))), .value(nil),
            .results(Array(repeating: result, count: 40)), .results([]), .done, .cold("no"),
        ]
        for response in responses {
            let encoded = response.encoded
            #expect(encoded.count == response.encodedLength)
            #expect(try HolderResponse(parsing: encoded) == response)
        }
    }
}

/// A TPM that accepts connections on a swtpm TCTI's two ports and never answers.
private final class SilentTPM: Sendable {
    let port: Int
    private let listeners: [Int32]
    private let accepted = Locked<[Int32]>([])
    private let stopped = Locked(false)
    private let threads = Locked<[JoinableThread]>([])

    var tcti: String { "swtpm:host=127.0.0.1,port=\(port)" }
    /// How many connections it accepted.
    var connections: Int { accepted.withLock { $0.count } }

    init() throws {
        let pair = try LoopbackSocket.listenOnConsecutivePorts()
        port = pair.port
        listeners = [pair.first, pair.second]
        for listener in listeners {
            let thread = try JoinableThread { [accepted] in
                while true {
                    let connection = accept(listener, nil, nil)
                    if connection < 0 {
                        if errno == EINTR { continue }
                        return
                    }
                    accepted.withLock { $0.append(connection) }
                }
            }
            threads.withLock { $0.append(thread) }
        }
    }

    /// Hangs up on every client and stops listening; calling it again does nothing.
    func stop() {
        guard
            !stopped.withLock({ stopped in
                defer { stopped = true }
                return stopped
            })
        else { return }
        for listener in listeners { shutdown(listener, Int32(SHUT_RDWR)) }
        for thread in threads.withLock({ $0 }) { thread.join() }
        for listener in listeners { close(listener) }
        for connection in accepted.withLock({ $0 }) { close(connection) }
    }
}

/// A new private directory for one test.
private func temporaryDirectory(_ name: String) throws -> String {
    let directory = NSTemporaryDirectory() + "tpm-keychain-holder-\(name)-" + UUID().uuidString
    try FileManager.default.createDirectory(
        atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
    return directory
}

/// Waits until `condition` holds, looking every millisecond, for at most a minute (a bound that
/// only a failure reaches).
private func waitFor(_ what: String, _ condition: () -> Bool) throws {
    let deadline = ContinuousClock.now + .seconds(60)
    while !condition() {
        guard ContinuousClock.now < deadline else { throw WaitFailure(what: what) }
        usleep(1_000)
    }
}

private struct WaitFailure: Error, CustomStringConvertible {
    let what: String
    var description: String { "gave up waiting for \(what)" }
}

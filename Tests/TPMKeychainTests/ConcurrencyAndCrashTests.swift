import Foundation
import StressProcess
import TPMKeychain
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The stress writer, built next to this test bundle.
let stressWriter = StressProcess.executable

/// A running tpm-keychain-stress writer and what it has acknowledged.
final class WriterProcess {
    private let stress: StressProcess
    var process: Process { stress.process }

    init(
        store: TestStore, service: String, accounts: [String], count: Int? = nil, size: Int = 64, start: Int = 0,
        deleteEvery: Int? = nil, until stopFile: String? = nil, extraArguments: [String] = []
    ) throws {
        var arguments = [
            "--keychain", store.location.path, "--tcti", store.simulator.tcti, "--service", service,
            "--accounts", accounts.joined(separator: ","), "--size", String(size), "--start", String(start),
        ]
        if let count { arguments += ["--count", String(count)] }
        if let deleteEvery { arguments += ["--delete-every", String(deleteEvery)] }
        if let stopFile { arguments += ["--until", stopFile] }
        stress = try StressProcess(arguments + extraArguments)
    }

    /// Blocks until the writer's output has a line starting with `marker`; false when it exited first.
    @discardableResult
    func waitFor(_ marker: String) -> Bool { stress.waitFor(marker) }

    func kill() { stress.kill() }

    /// How many values a writer started with `until:` wrote before it stopped, after the process ended.
    func stoppedAfter() -> Int? {
        let line = stress.finish().split(separator: "\n").last { $0.hasPrefix("stopped after ") }
        return line.flatMap { Int($0.dropFirst("stopped after ".count)) }
    }

    /// Every acknowledged sequence number per account, after the process ended.
    func acknowledged() -> [String: [Int]] {
        var result: [String: [Int]] = [:]
        for line in stress.finish().split(separator: "\n") where line.hasPrefix("wrote ") {
            let parts = line.split(separator: " ")
            if parts.count == 3, let sequence = Int(parts[2]) { result[String(parts[1]), default: []].append(sequence) }
        }
        return result
    }
}

/// Parses a stress value "<account>:<sequence>:....", checking every byte.
func sequence(in value: Data, account: String, size: Int) -> Int? {
    let text = String(decoding: value, as: UTF8.self)
    let parts = text.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
    guard value.count == size, parts.count == 3, parts[0] == account, parts[2].allSatisfy({ $0 == "." }) else {
        return nil
    }
    return Int(parts[1])
}

@Suite struct ConcurrencyAndCrashTests {
    @Test(
        "8 tasks doing 1,000 mixed operations each on one service: nothing lost, nothing corrupt", .tags(.concurrency))
    func concurrentTasks() async throws {
        let store = try TestStore()
        let keychain = try store.keychain("com.example.concurrent")
        let finals = try await withThrowingTaskGroup(of: [String: String].self) { group in
            for task in 0..<8 {
                group.addTask {
                    var expected: [String: String] = [:]
                    for operation in 0..<1000 {
                        let key = "task\(task)-key\(operation % 16)"
                        switch operation % 6 {
                        case 0, 1:
                            let value = "task\(task)-op\(operation)"
                            try keychain.set(value, forKey: key)
                            expected[key] = value
                        case 2:
                            #expect(try keychain.string(forKey: key) == expected[key])
                        case 3:
                            #expect(try keychain.contains(key) == (expected[key] != nil))
                        case 4:
                            if operation % 12 == 4 {
                                try keychain.remove(key)
                                expected[key] = nil
                            } else {
                                try keychain.set("shared-by-\(task)", forKey: "shared")
                            }
                        default:
                            let shared = try keychain.string(forKey: "shared")
                            #expect(shared == nil || shared!.hasPrefix("shared-by-"))
                        }
                    }
                    return expected
                }
            }
            return try await group.reduce(into: [String: String]()) { $0.merge($1) { a, _ in a } }
        }
        for (key, value) in finals { #expect(try keychain.string(forKey: key) == value, "\(key)") }
        let keys = try keychain.allKeys()
        #expect(Set(keys) == Set(finals.keys).union(["shared"]))
    }

    @Test("Two processes writing the same service at once lose nothing", .tags(.concurrency))
    func twoProcesses() throws {
        let store = try TestStore()
        let keychain = try store.keychain("com.example.shared")
        try keychain.set("seed", forKey: "seed") // the store exists before both writers open it
        let count = 300
        let accounts = (0..<2).map { writer in (0..<10).map { "writer\(writer)-\($0)" } + ["shared"] }
        let writers = try (0..<2).map {
            try WriterProcess(store: store, service: "com.example.shared", accounts: accounts[$0], count: count)
        }
        for writer in writers { writer.process.waitUntilExit() }
        for writer in writers { #expect(writer.process.terminationStatus == 0) }
        var lastShared: [Int] = []
        for (index, writer) in writers.enumerated() {
            let acknowledged = writer.acknowledged()
            #expect(acknowledged.values.reduce(0) { $0 + $1.count } == count)
            for account in accounts[index] where account != "shared" {
                let value = try #require(try keychain.data(forKey: account))
                #expect(sequence(in: value, account: account, size: 64) == acknowledged[account]?.max(), "\(account)")
            }
            lastShared.append(acknowledged["shared"]?.max() ?? -1)
        }
        let shared = try #require(try keychain.data(forKey: "shared"))
        #expect(lastShared.contains(sequence(in: shared, account: "shared", size: 64) ?? -2))
        #expect(try keychain.allKeys().count == 22)
    }

    @Test(
        "kill -9 of a writer mid-write, 200 times: the item holds its old or its new value, and no temp files pile up")
    func killedWriters() throws {
        let store = try TestStore()
        let keychain = try store.keychain("com.example.crash")
        let size = 16 << 10
        var current: Int? = nil
        var generator = SystemRandomNumberGenerator()
        var killedWhileWriting = 0
        var leftoversSeen = 0
        for cycle in 0..<200 {
            // Every fourth cycle (once the item's file exists) the writer stops in its second write,
            // between writing the new contents and the rename, and is killed there: kills in the
            // middle of a write whatever the machine's speed. The others land anywhere in the loop.
            let itemFile = cycle % 4 == 1 ? try store.itemFiles().first.map { ($0 as NSString).lastPathComponent } : nil
            let pause = itemFile.map { ["--pause-at", "replacing \($0)", "--pause-count", "2"] } ?? []
            let writer = try WriterProcess(
                store: store, service: "com.example.crash", accounts: ["item"], size: size,
                start: cycle * 1_000_000, extraArguments: pause)
            if let itemFile {
                writer.waitFor("paused replacing \(itemFile)")
            } else {
                writer.waitFor("wrote ") // the writer is in its loop: every kill lands while it writes
                usleep(UInt32.random(in: 0...3_000, using: &generator))
            }
            writer.kill()
            let acknowledged = writer.acknowledged()["item"] ?? []
            if !acknowledged.isEmpty { killedWhileWriting += 1 }
            var allowed: Set<Int?> = acknowledged.isEmpty ? [current, cycle * 1_000_000] : []
            if let last = acknowledged.max() { allowed.formUnion([last, last + 1]) }
            let value = try keychain.data(forKey: "item")
            let found = value.flatMap { sequence(in: $0, account: "item", size: size) }
            #expect(value == nil || found != nil, "cycle \(cycle): garbage in the item")
            #expect(allowed.contains(found), "cycle \(cycle): found \(String(describing: found)), allowed \(allowed)")
            current = found
            let temporaries = try store.files().filter { $0.hasSuffix(".tmp") }
            #expect(temporaries.count <= 1, "cycle \(cycle): \(temporaries.count) temporary files")
            leftoversSeen += temporaries.count
        }
        // Every kill landed in the writing loop, and some in the middle of a write (a temp file left).
        #expect(killedWhileWriting == 200, "\(killedWhileWriting) of 200 writers were killed while writing")
        #expect(leftoversSeen > 0, "no kill landed mid-write")
        try keychain.set(Data(count: 8), forKey: "item") // the next writer of the item replaces what a dead one left
        #expect(try store.files().filter { $0.hasSuffix(".tmp") }.isEmpty)
    }

    @Test(
        "kill -9 of writers that write and delete, 100 times, with a reader open all along: no read, listing or new handle ever reports a rollback, and every item holds a value some writer wrote",
        .tags(.concurrency))
    func killedWritersNeverLookRolledBack() throws {
        let store = try TestStore()
        let keychain = try store.keychain("com.example.rollback")
        let accounts = (0..<6).map { "item\($0)" }
        var generator = SystemRandomNumberGenerator()
        for cycle in 0..<100 {
            let writer = try WriterProcess(
                store: store, service: "com.example.rollback", accounts: accounts, size: 256,
                start: cycle * 1_000_000, deleteEvery: 3)
            writer.waitFor("wrote ")
            usleep(UInt32.random(in: 0...4_000, using: &generator))
            writer.kill()
            for account in accounts {
                if let value = try keychain.data(forKey: account) {
                    #expect(
                        sequence(in: value, account: account, size: 256) != nil,
                        "cycle \(cycle): \(account) holds garbage")
                }
            }
            let listed = try keychain.allKeys()
            #expect(Set(listed).isSubset(of: Set(accounts)), "cycle \(cycle): \(listed)")
            // Every few kills the store is opened afresh: the epoch check against the TPM counter
            // and a manifest read from the start, torn tail included.
            if cycle % 5 == 4 { Keychain.closeStore(store.location) }
        }
    }
}

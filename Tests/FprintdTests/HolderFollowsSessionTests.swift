import Foundation
import TPMKeychain
import TPMKeychainTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `tpm-keychain hold-session` against python-dbusmock's logind: a suspend (PrepareForSleep)
/// and a locked screen erase the keys it holds, so its next read opens the store again (TPM
/// commands, counted by a recording proxy), and the read after is warm again; while the screen
/// is locked, or logind is gone, it holds nothing.
@Suite(.serialized)
struct HolderFollowsSessionTests {
    @Test(
        "a suspend and a screen lock make the session holder erase its keys: the next lookup opens the store again through the TPM; while locked or without logind it holds nothing"
    )
    func suspendAndScreenLockEraseTheKeys() async throws {
        let mock = try await LogindMock.start()
        defer { mock.stop() }
        _ = try await mock.addSession("c1")
        let holder = try HolderUnderLogind(mock, session: "c1")
        defer { holder.stop() }
        try await holder.waitFor("the holder follows the session", "following the screen lock and suspend")
        #expect(try holder.lookup() == "held\n") // the holder opens the store
        var read = try holder.countedLookup()
        #expect(read.output == "held\n" && read.commands == 0, "\(read) \(holder.log())")

        // logind waits for the holder before it suspends: a delay inhibitor, released once the
        // keys are erased, and taken again after the wake.
        func waitUntilInhibiting(_ expected: Bool, _ what: String) async throws {
            let deadline = ContinuousClock.now + .seconds(30)
            while try await mock.inhibitors().contains("sleep:tpm-keychain:delay") != expected {
                guard ContinuousClock.now < deadline else {
                    Issue.record("timed out waiting until \(what)")
                    return
                }
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        try await waitUntilInhibiting(true, "the holder takes a delay inhibitor")
        try await mock.prepareForSleep(true)
        try await waitUntilInhibiting(false, "the holder releases its inhibitor")
        #expect(holder.log().contains("about to suspend: every key held is erased"), "released before erasing")
        // Between the announcement and the wake nothing is held again: each lookup opens the store itself.
        for _ in 0..<2 {
            read = try holder.countedLookup()
            #expect(read.output == "held\n" && read.commands > 0, "the holder held keys into the suspend: \(read)")
        }
        try await mock.prepareForSleep(false)
        try await waitUntilInhibiting(true, "the holder takes its inhibitor again after the wake")
        read = try holder.countedLookup()
        #expect(read.output == "held\n" && read.commands > 0, "the keys outlived the suspend: \(read)")
        read = try holder.countedLookup()
        #expect(read.output == "held\n" && read.commands == 0, "\(read)")

        try await mock.setLockedHint("c1", true)
        try await holder.waitFor(
            "the holder erases its keys at the screen lock", "screen locked: every key held is erased")
        read = try holder.countedLookup()
        #expect(read.output == "held\n" && read.commands > 0, "the keys outlived the screen lock: \(read)")
        // While the screen stays locked the holder holds nothing: each lookup opens the store itself.
        read = try holder.countedLookup()
        #expect(read.output == "held\n" && read.commands > 0, "the holder held keys again while locked: \(read)")

        try await mock.setLockedHint("c1", false)
        try await holder.waitFor("the holder answers again after the unlock", "reads are answered again")
        #expect(try holder.lookup() == "held\n") // the holder opens the store again
        read = try holder.countedLookup()
        #expect(read.output == "held\n" && read.commands == 0, "\(read)")

        // logind leaves the bus: the holder can no longer see a suspend or a lock, so it holds nothing.
        mock.killService()
        try await holder.waitFor("the holder lets go when logind cannot say", "logind can no longer say")
        for _ in 0..<2 {
            read = try holder.countedLookup()
            #expect(read.output == "held\n" && read.commands > 0, "the holder held keys without logind: \(read)")
        }
    }

    @Test(
        "a holder started before its session exists follows it once it appears, and holds nothing from the end of a session until a new one is followed"
    )
    func sessionsThatComeAndGo() async throws {
        let mock = try await LogindMock.start()
        defer { mock.stop() }
        // Started by a lookup before the login: no session to follow yet, so it serves as a
        // holder without logind does, and looks again.
        let holder = try HolderUnderLogind(mock, session: "c2")
        defer { holder.stop() }
        try await holder.waitFor(
            "the holder finds no session", "not following the session's screen lock and suspend yet")
        _ = try await mock.addSession("c2")
        try await holder.waitFor(
            "the holder follows the session once it exists", "following the screen lock and suspend")
        #expect(try holder.lookup() == "held\n")
        var read = try holder.countedLookup()
        #expect(read.output == "held\n" && read.commands == 0, "\(read) \(holder.log())")

        // The session ends: nothing is held until a session is followed again.
        try await mock.removeSession("c2")
        try await holder.waitFor("the holder lets go at the session's end", "logind can no longer say")
        for _ in 0..<2 {
            read = try holder.countedLookup()
            #expect(read.output == "held\n" && read.commands > 0, "the holder held keys without a session: \(read)")
        }
        _ = try await mock.addSession("c2")
        try await holder.waitFor("the holder serves again under the new session", "reads are answered again")
        #expect(try holder.lookup() == "held\n")
        read = try holder.countedLookup()
        #expect(read.output == "held\n" && read.commands == 0, "\(read)")
    }

    static func tool(_ name: String) -> String {
        let bundle =
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        return URL(fileURLWithPath: bundle).deletingLastPathComponent().appendingPathComponent(name).path
    }
}

/// A store with one item ("held"), a swtpm behind a recording proxy, and `tpm-keychain
/// hold-session` following `session` on the mock's bus, each killed or removed by ``stop()``.
private final class HolderUnderLogind {
    let simulator: SoftwareTPM
    let proxy: RecordingTPMProxy
    let directory: String
    let environment: [String]
    let logPath: String
    let holder: pid_t
    let store: String
    let tool = HolderFollowsSessionTests.tool("tpm-keychain")

    init(_ mock: LogindMock, session: String) throws {
        simulator = try SoftwareTPM.start()
        proxy = try RecordingTPMProxy.start(forwardingTo: simulator.port)
        directory = NSTemporaryDirectory() + "tpm-keychain-holder-session-" + UUID().uuidString
        try FileManager.default.createDirectory(
            atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        store = directory + "/keychain"
        let socket = directory + "/session.socket"
        environment = [
            "TPM_KEYCHAIN_TCTI=\(proxy.tcti)", "TPM_KEYCHAIN_SESSION_HOLDER=\(socket)", "HOME=\(directory)",
            "XDG_STATE_HOME=\(directory)/state", "PATH=/usr/bin:/bin",
        ]
        logPath = directory + "/holder.log"
        _ = try Self.run(
            tool, ["add-generic-password", "-s", "svc", "-a", "acct", "--keychain", store], environment, stdin: "held")
        holder = try FprintdMock.spawn(
            tool,
            ["hold-session", "--socket", socket, "--logind-address", mock.address, "--logind-session", session],
            environment: environment, standardOutput: logPath)
    }

    func stop() {
        kill(holder, SIGKILL)
        var status: Int32 = 0
        _ = waitpid(holder, &status, 0)
        proxy.stop()
        simulator.stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    func log() -> String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    func waitFor(_ what: String, _ line: String) async throws {
        try await ScreenLockFollowerTests.eventually(what) { self.log().contains(line) }
    }

    /// The item's value, looked up by a new process.
    func lookup() throws -> String {
        try Self.run(
            tool, ["find-generic-password", "-s", "svc", "-a", "acct", "-w", "--keychain", store], environment)
    }

    /// A lookup's output and the TPM commands it made the holder or itself send.
    func countedLookup() throws -> (output: String, commands: Int) {
        proxy.reset()
        let output = try lookup()
        return (output, proxy.commandCount)
    }

    private static func run(
        _ tool: String, _ arguments: [String], _ environment: [String], stdin: String? = nil
    ) throws
        -> String
    {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: tool)
        process.arguments = arguments
        process.environment = Dictionary(
            uniqueKeysWithValues: environment.map {
                let parts = $0.split(separator: "=", maxSplits: 1)
                return (String(parts[0]), String(parts[1]))
            })
        let input = Pipe()
        let output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        try process.run()
        if let stdin { input.fileHandleForWriting.write(Data(stdin.utf8)) }
        try input.fileHandleForWriting.close()
        let bytes = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return String(decoding: bytes, as: UTF8.self)
    }
}

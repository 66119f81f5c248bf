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
        let simulator = try SoftwareTPM.start()
        defer { simulator.stop() }
        let proxy = try RecordingTPMProxy.start(forwardingTo: simulator.port)
        defer { proxy.stop() }
        let directory = NSTemporaryDirectory() + "tpm-keychain-holder-session-" + UUID().uuidString
        try FileManager.default.createDirectory(
            atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = directory + "/keychain"
        let socket = directory + "/session.socket"
        let tool = Self.tool("tpm-keychain")
        let environment = [
            "TPM_KEYCHAIN_TCTI=\(proxy.tcti)", "TPM_KEYCHAIN_SESSION_HOLDER=\(socket)", "HOME=\(directory)",
            "XDG_STATE_HOME=\(directory)/state", "PATH=/usr/bin:/bin",
        ]
        func run(_ arguments: [String], stdin: String? = nil) throws -> String {
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
        _ = try run(["add-generic-password", "-s", "svc", "-a", "acct", "--keychain", store], stdin: "held")

        let log = directory + "/holder.log"
        let holder = try FprintdMock.spawn(
            tool,
            ["hold-session", "--socket", socket, "--logind-address", mock.address, "--logind-session", "c1"],
            environment: environment, standardOutput: log)
        defer {
            kill(holder, SIGKILL)
            var status: Int32 = 0
            _ = waitpid(holder, &status, 0)
        }
        func holderLog() -> String { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }
        try await ScreenLockFollowerTests.eventually("the holder follows the session") {
            holderLog().contains("following the screen lock and suspend")
        }
        let lookup = ["find-generic-password", "-s", "svc", "-a", "acct", "-w", "--keychain", store]
        /// The lookup's output and the TPM commands it made the holder or itself send.
        func counted() throws -> (output: String, commands: Int) {
            proxy.reset()
            let output = try run(lookup)
            return (output, proxy.commandCount)
        }
        #expect(try run(lookup) == "held\n") // the holder opens the store
        var read = try counted()
        #expect(read.output == "held\n" && read.commands == 0, "\(read) \(holderLog())")

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
        #expect(holderLog().contains("about to suspend: every key held is erased"), "released before erasing")
        try await mock.prepareForSleep(false)
        try await waitUntilInhibiting(true, "the holder takes its inhibitor again after the wake")
        read = try counted()
        #expect(read.output == "held\n" && read.commands > 0, "the keys outlived the suspend: \(read)")
        read = try counted()
        #expect(read.output == "held\n" && read.commands == 0, "\(read)")

        try await mock.setLockedHint("c1", true)
        try await ScreenLockFollowerTests.eventually("the holder erases its keys at the screen lock") {
            holderLog().contains("screen locked: every key held is erased")
        }
        read = try counted()
        #expect(read.output == "held\n" && read.commands > 0, "the keys outlived the screen lock: \(read)")
        // While the screen stays locked the holder holds nothing: each lookup opens the store itself.
        read = try counted()
        #expect(read.output == "held\n" && read.commands > 0, "the holder held keys again while locked: \(read)")

        try await mock.setLockedHint("c1", false)
        try await ScreenLockFollowerTests.eventually("the holder answers again after the unlock") {
            holderLog().contains("reads are answered again")
        }
        #expect(try run(lookup) == "held\n") // the holder opens the store again
        read = try counted()
        #expect(read.output == "held\n" && read.commands == 0, "\(read)")

        // logind leaves the bus: the holder can no longer see a suspend or a lock, so it holds nothing.
        mock.killService()
        try await ScreenLockFollowerTests.eventually("the holder lets go when logind cannot say") {
            holderLog().contains("logind can no longer say")
        }
        for _ in 0..<2 {
            read = try counted()
            #expect(read.output == "held\n" && read.commands > 0, "the holder held keys without logind: \(read)")
        }
    }

    static func tool(_ name: String) -> String {
        let bundle =
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        return URL(fileURLWithPath: bundle).deletingLastPathComponent().appendingPathComponent(name).path
    }
}

import Foundation
import SystemCalls
import TPMKeychainTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The ssh agent with a biometryCurrentSet key and fprintd (the mock on a private bus): a
/// matching finger signs, a finger that does not match signs nothing, and once the enrolled
/// fingers change the TPM refuses the key for good; OpenSSH's ssh-keygen is the client.
@Suite("the ssh agent with fprintd", .serialized)
struct AgentBiometryTests {
    @Test(
        "a biometryCurrentSet SSH key signs after a matching finger, not after another, and never again once the enrolled fingers change"
    )
    func biometryKeyThroughTheAgent() async throws {
        let mock = try await FprintdMock.start()
        defer { mock.stop() }
        let device = try await mock.addDevice()
        try await mock.setEnrolledFingers(device, ["right-index-finger"])
        try await mock.setVerifyScript(device, [(result: "verify-match", done: true, milliseconds: 10)])
        let agent = try BiometryAgent(fprintd: mock.address)

        let created = try agent.run(
            agent.tool("tpm-keychain-keys"),
            [
                "create", "--keychain", agent.store, "--label", "finger", "--tag", "ssh", "--access-control",
                "biometryCurrentSet", "--fprintd-address", mock.address,
            ])
        #expect(created.status == 0, "\(created.output)\n\(mock.logs())")
        try agent.start()

        let signed = try agent.sign("finger")
        #expect(signed.status == 0, "\(signed.output)\n\(agent.errors)")
        try await mock.waitForCall("VerifyStart", on: device)

        try await mock.setVerifyScript(device, [(result: "verify-no-match", done: true, milliseconds: 10)])
        let otherFinger = try agent.sign("finger")
        #expect(otherFinger.status != 0, "\(otherFinger.output)")

        // Another finger enrolled: the key's policy names the old set, and the TPM refuses it.
        try await mock.setEnrolledFingers(device, ["right-index-finger", "left-thumb"])
        try await mock.setVerifyScript(device, [(result: "verify-match", done: true, milliseconds: 10)])
        let reEnrolled = try agent.sign("finger")
        #expect(reEnrolled.status != 0, "\(reEnrolled.output)")
        let refusals = agent.errors.split(separator: "\n").filter { $0.contains("refused a signature") }
        #expect(refusals.count == 2, "\(agent.errors)")
        #expect(refusals.last?.lowercased().contains("enroll") == true, "\(agent.errors)")
        // The key is still listed: it is refused, not lost.
        #expect(try agent.run("/usr/bin/ssh-add", ["-L"]).output.contains(" finger"))
    }
}

/// A store on a private swtpm and tpm-keychain-ssh-agent over it, asking fprintd on `fprintd`.
final class BiometryAgent {
    let simulator: SoftwareTPM
    let directory: String
    let fprintd: String
    private var agent: Process?
    var store: String { directory + "/store" }
    var socket: String { directory + "/agent.socket" }
    var errors: String { (try? String(contentsOfFile: directory + "/agent.err", encoding: .utf8)) ?? "" }

    init(fprintd: String) throws {
        self.fprintd = fprintd
        simulator = try SoftwareTPM.start()
        directory = NSTemporaryDirectory() + "tpm-keychain-agent-fprintd-" + UUID().uuidString
        try FileManager.default.createDirectory(
            atPath: directory, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        let created = try run(tool("tpm-keychain"), ["create-keychain", store])
        guard created.status == 0 else { throw FprintdMockError(description: created.output) }
    }

    var environment: [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment["TPM_KEYCHAIN_TCTI"] = simulator.tcti
        environment["SSH_AUTH_SOCK"] = socket
        environment["XDG_STATE_HOME"] = directory + "/xdg-state"
        environment["XDG_DATA_HOME"] = directory + "/xdg-data"
        return environment
    }

    func tool(_ name: String) -> String {
        let bundle =
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        return URL(fileURLWithPath: bundle).deletingLastPathComponent().appendingPathComponent(name).path
    }

    /// Starts the agent and waits for the line that says where it listens.
    func start() throws {
        let process = Process()
        let output = directory + "/agent.out"
        _ = FileManager.default.createFile(atPath: output, contents: nil)
        _ = FileManager.default.createFile(atPath: directory + "/agent.err", contents: nil)
        process.executableURL = URL(fileURLWithPath: tool("tpm-keychain-ssh-agent"))
        process.arguments = ["--keychain", store, "-a", socket, "--fprintd-address", fprintd]
        process.environment = environment
        process.standardOutput = FileHandle(forWritingAtPath: output)
        process.standardError = FileHandle(forWritingAtPath: directory + "/agent.err")
        try process.run()
        agent = process
        let deadline = ContinuousClock.now + .seconds(120)
        while !((try? String(contentsOfFile: output, encoding: .utf8)) ?? "").contains("SSH_AUTH_SOCK=") {
            guard process.isRunning, ContinuousClock.now < deadline else {
                throw FprintdMockError(description: "the agent did not start: \(errors)")
            }
            usleep(20_000)
        }
    }

    /// ssh-keygen -Y sign with the agent's key `label`: its status and output.
    func sign(_ label: String) throws -> (status: Int32, output: String) {
        let listed = try run("/usr/bin/ssh-add", ["-L"]).output.split(separator: "\n")
        guard let line = listed.first(where: { $0.hasSuffix(" " + label) }) else {
            throw FprintdMockError(description: "the agent lists no key \(label): \(listed) \(errors)")
        }
        let publicKey = directory + "/\(label).pub"
        let message = directory + "/message-\(UUID().uuidString)"
        try (line + "\n").write(toFile: publicKey, atomically: true, encoding: .utf8)
        try "a message\n".write(toFile: message, atomically: true, encoding: .utf8)
        return try run("/usr/bin/ssh-keygen", ["-Y", "sign", "-f", publicKey, "-n", "file", message])
    }

    func run(_ executable: String, _ arguments: [String]) throws -> (status: Int32, output: String) {
        let process = Process()
        let output = directory + "/run-\(UUID().uuidString).out"
        _ = FileManager.default.createFile(atPath: output, contents: nil)
        defer { try? FileManager.default.removeItem(atPath: output) }
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.environment = environment
        let handle = FileHandle(forWritingAtPath: output)
        process.standardOutput = handle
        process.standardError = handle
        process.standardInput = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        return (process.terminationStatus, (try? String(contentsOfFile: output, encoding: .utf8)) ?? "")
    }

    deinit {
        if let agent, agent.isRunning {
            kill(agent.processIdentifier, SIGTERM)
            agent.waitUntilExit()
        }
        simulator.stop()
        try? FileManager.default.removeItem(atPath: directory)
    }
}

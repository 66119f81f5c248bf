import Crypto
import Foundation
import SSHAgent
import SecurityCompat
import SystemCalls
import TPMKeychain
import TPMKeychainTesting

#if canImport(Glibc)
import Glibc
#endif

/// A signature through the ssh agent (a client connects to its socket, asks, reads the answer:
/// the agent finds the key through the service and the TPM signs) against the C floor doing the
/// same TPM work (ESAPIFloor sign: connect, ContextLoad, Load, salted session, Sign, flushes),
/// interleaved in batches.
struct AgentBenchmarks: @unchecked Sendable { // Summary is only used from one task at a time
    let summary: Summary
    let iterations: Int?

    func run() throws {
        let simulator = try SoftwareTPM.start()
        defer { simulator.stop() }
        let directory = NSTemporaryDirectory() + "tpm-keychain-agent-bench-" + UUID().uuidString
        try FileManager.default.createDirectory(
            atPath: directory, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        defer { try? FileManager.default.removeItem(atPath: directory) }
        print("\n== The ssh agent; swtpm \(simulator.tcti)")
        var location = try KeychainLocation(path: directory + "/store", tcti: simulator.tcti)
        location.deviceDirectory = directory + "/device"
        defer { Keychain.closeStore(location) }
        KeychainEnvironment.location = location
        let parameters: [CFString: Any] = [
            kSecAttrKeyType: kSecAttrKeyTypeECSECPrimeRandom, kSecAttrKeySizeInBits: 256,
            kSecAttrTokenID: kSecAttrTokenIDSecureEnclave,
            kSecPrivateKeyAttrs: [
                kSecAttrIsPermanent: true, kSecAttrLabel: "bench", kSecAttrApplicationTag: Data("ssh".utf8),
            ] as [CFString: Any],
        ]
        var error: Unmanaged<CFError>?
        guard let key = SecKeyCreateRandomKey(parameters as CFDictionary, &error),
            let publicKey = SecKeyCopyExternalRepresentation(SecKeyCopyPublicKey(key)!, &error) as Data?
        else { throw BenchmarkError("the key could not be made: \(String(describing: error))") }

        let socket = directory + "/agent.socket"
        let server = try AgentServer(socketPath: socket, keyring: AgentKeyring(location: location), log: { _ in })
        let thread = try JoinableThread { server.serve() }
        defer {
            server.stop()
            thread.join()
        }
        var request = SSHWireWriter()
        request.byte(13)
        request.string(SSHECDSAKey.blob(publicKey: Array(publicKey)))
        request.string(Array("a session identifier to sign".utf8))
        request.uint32(0)
        var framed = SSHWireWriter()
        framed.string(request.bytes)
        let message = framed.bytes
        // The first signature opens the store (an unseal) and is checked to verify.
        let first = try Self.sign(message, socket)
        guard first.first == 14 else { throw BenchmarkError("the agent refused to sign: \(first)") }

        let batch = max((iterations ?? 200) / 10, 2)
        let (ours, floor) = try interleavedWithFloor(
            batch: batch, ours: { _ = try Self.sign(message, socket) },
            floor: { try AccessBenchmarks.floorSamples(simulator.tcti, $0, mode: "sign") })
        summary.add(
            Figure(
                name: "ssh agent signature (connect, SIGN_REQUEST, answer; P-256 in the TPM)", ours: ours,
                floorName: "C ESAPI: connect, ContextLoad, Load, salted HMAC session, Sign, flushes",
                floor: floor, goal: 1.2))

        // The PKCS#11 module in a C program (Fixtures/pkcs11/pkcs11-client.c): C_SignInit and
        // C_Sign of a digest, each a connection to the agent; both sides are processes that
        // time their own operations, in alternating batches.
        let client = try Self.buildModuleClient(in: directory)
        let moduleSamples = { (count: Int) throws -> [Double] in
            try processSamples(
                client.executable, [client.module, "bench", "bench", String(count)],
                environment: ["TPM_KEYCHAIN_AGENT_SOCK": socket])
        }
        guard try moduleSamples(1).count == 1 else { throw BenchmarkError("the module did not sign") }
        let (module, moduleFloor) = try interleavedProcesses(
            batch: batch, ours: moduleSamples,
            floor: { try AccessBenchmarks.floorSamples(simulator.tcti, $0, mode: "sign") })
        summary.add(
            Figure(
                name: "PKCS#11 module signature (C_SignInit + C_Sign of a digest, through the agent)",
                ours: module, floorName: "C ESAPI: connect, ContextLoad, Load, salted HMAC session, Sign, flushes",
                floor: moduleFloor, goal: 1.2))
    }

    /// The module (Scripts/install-pkcs11-module.sh) and the C client that loads it, built into `directory`.
    static func buildModuleClient(in directory: String) throws -> (module: String, executable: String) {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent()
        let executable = directory + "/pkcs11-client"
        for (tool, arguments) in [
            (root.appendingPathComponent("Scripts/install-pkcs11-module.sh").path, ["--output", directory]),
            (
                "/usr/bin/cc",
                [
                    "-O2", root.appendingPathComponent("Fixtures/pkcs11/pkcs11-client.c").path, "-o", executable,
                    "-lcrypto", "-lpthread", "-ldl",
                ]
            ),
        ] {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: tool)
            process.arguments = arguments
            process.standardOutput = FileHandle.nullDevice
            try process.run()
            process.waitUntilExit()
            guard process.terminationStatus == 0 else { throw BenchmarkError("\(tool) failed") }
        }
        return (directory + "/libtpm-keychain-pkcs11.so", executable)
    }

    /// One client: connects, sends `message`, reads the answer's body.
    static func sign(_ message: [UInt8], _ path: String) throws -> [UInt8] {
        let descriptor = Glibc.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        defer { close(descriptor) }
        guard descriptor >= 0, withUnixSocketAddress(path, { connect(descriptor, $0, $1) }) == 0 else {
            throw BenchmarkError("cannot connect to the agent")
        }
        try writeAll(descriptor, message)
        var answer: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 1024)
        while answer.count < 4 || answer.count < 4 + Int(bigEndianLength(answer)) {
            let count = read(descriptor, &buffer, buffer.count)
            guard count > 0 else { throw BenchmarkError("the agent hung up") }
            answer += buffer[0..<count]
        }
        return Array(answer.dropFirst(4))
    }
}

private func bigEndianLength(_ bytes: [UInt8]) -> UInt32 {
    UInt32(bytes[0]) << 24 | UInt32(bytes[1]) << 16 | UInt32(bytes[2]) << 8 | UInt32(bytes[3])
}

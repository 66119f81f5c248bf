import Crypto
import Foundation
import SystemCalls
import TPMKeychain
import TPMKeychainFprintd
import TPMKeychainTesting
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `tpm-keychain-enrollment`, the root helper that tells each user a keyed hash of their own
/// print files, and what FprintdAuthenticator makes of it with the real fprintd.
@Suite("the enrollment helper", .serialized)
struct EnrollmentHelperTests {
    @Test(
        "Each user gets the keyed hash of their own prints only (a second user made with useradd gets theirs, or none); the key stays root's; a changed print changes the answer",
        .enabled(if: geteuid() == 0, "needs root: the helper runs as root and the test creates a second user"))
    func eachUserGetsTheirOwn() async throws {
        let helper = try EnrollmentHelper.start()
        defer { helper.stop() }
        let user = "tkenr" + String(UInt32.random(in: 0...UInt32.max), radix: 36)
        try SystemTool.run("/usr/sbin/useradd", ["-M", "-N", "-s", "/usr/sbin/nologin", user])
        defer { try? SystemTool.run("/usr/sbin/userdel", [user]) }

        // Nobody has prints yet: "none" for both.
        #expect(try helper.query(as: nil) == "1 none\n")
        #expect(try helper.query(as: user) == "1 none\n")

        try helper.writePrint(user: "root", "virtual_device/0/7", Data("root's print".utf8))
        try helper.writePrint(user: user, "virtual_device/0/7", Data("the other user's print".utf8))
        let key = SymmetricKey(data: try Data(contentsOf: URL(fileURLWithPath: helper.keyPath)))
        let rootAnswer = try helper.query(as: nil)
        #expect(rootAnswer == "1 " + Self.expected(key, [("virtual_device/0/7", "root's print")]) + "\n")
        let userAnswer = try helper.query(as: user)
        #expect(userAnswer == "1 " + Self.expected(key, [("virtual_device/0/7", "the other user's print")]) + "\n")

        // systemd's socket activation (Accept=yes): one connection on standard input, the same answer.
        let activated = try SystemTool.output(
            "/usr/bin/python3",
            [
                "-c",
                "import socket, subprocess, sys\nmine, theirs = socket.socketpair()\nsubprocess.Popen(sys.argv[1:], stdin=theirs)\ntheirs.close()\nprint(mine.recv(200).decode(), end='')",
                EnrollmentHelper.executable, "serve", "--prints", helper.prints, "--key", helper.keyPath,
            ])
        #expect(String(decoding: activated, as: UTF8.self) == rootAnswer)

        // The user binding: HMAC-SHA256 of the user ID under a key derived from the same key,
        // as docs/SECURITY.md ("User binding") says; an unknown request is refused.
        let bindingKey = HKDF<SHA256>.deriveKey(
            inputKeyMaterial: key, info: Array("tpm-keychain user binding v1".utf8), outputByteCount: 32)
        let rootBinding = HMAC<SHA256>.authenticationCode(for: [0, 0, 0, 0] as [UInt8], using: bindingKey)
        #expect(
            try helper.ask("user-binding")
                == "binding " + Array(rootBinding).map { String(format: "%02x", $0) }.joined() + "\n")
        #expect(try helper.ask("give me everything").hasPrefix("0 unknown request"))
        #expect(try helper.ask(String(repeating: "x", count: 100)).hasPrefix("0 the request is too long"))

        // Hostile clients: one that connects and sends half a request, then hangs, and one that
        // hangs up at once, do not keep the next caller from its answer (the helper gives a
        // request line a deadline of its own); the next caller gets the same secret.
        let hung = try SystemTool.output(
            "/usr/bin/python3",
            [
                "-c",
                """
                import socket, sys
                hanging = socket.socket(socket.AF_UNIX); hanging.connect(sys.argv[1]); hanging.sendall(b'user-bi')
                gone = socket.socket(socket.AF_UNIX); gone.connect(sys.argv[1]); gone.close()
                asking = socket.socket(socket.AF_UNIX); asking.connect(sys.argv[1]); asking.sendall(b'user-binding\\n')
                print(asking.recv(200).decode(), end='')
                """,
                helper.socketPath,
            ])
        let direct = try helper.ask("user-binding")
        #expect(String(decoding: hung, as: UTF8.self) == direct && direct.hasPrefix("binding "))

        // The key is root's alone; a changed print changes the answer.
        #expect(permissions(helper.keyPath) == 0o600 && permissions(helper.keyDirectory) == 0o700)
        try helper.writePrint(user: "root", "virtual_device/0/7", Data("someone else's print".utf8))
        #expect(try helper.query(as: nil) != rootAnswer)
    }

    @Test(
        "With the helper, the real fprintd's finger deleted and enrolled again under the same name (someone else's) invalidates a biometryCurrentSet item that was bound before the helper was installed and adopted without a change; a helper installed but not answering is not available",
        .enabled(if: geteuid() == 0, "needs root: the helper reads fprintd's print store as root"))
    func reEnrollmentIsSeen() async throws {
        let real = try await RealFprintd.start()
        defer { real.stop() }
        let helper = try EnrollmentHelper.start(prints: real.stateDirectory)
        defer { helper.stop() }
        let simulator = try SoftwareTPM.start()
        defer { simulator.stop() }
        let directory = NSTemporaryDirectory() + "enrollment-helper-store-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        do {
            var location = try KeychainLocation(path: directory + "/store", tcti: simulator.tcti)
            location.deviceDirectory = directory + "/device"
            let keychain = try Keychain(service: "com.example.enrollment-helper", location: location)
            try await real.enroll("right-index-finger", identity: "alice")

            // Bound while only the finger names are known (no helper at this path).
            let namesOnly = FprintdAuthenticator(
                busAddress: real.address, enrollmentHelperSocket: directory + "/no-helper.sock")
            let before = try #require(try await namesOnly.enrollment())
            try await keychain.set(
                "s3cret", forKey: "token",
                accessControl: try AccessControl(.whenUnlockedThisDeviceOnly, flags: .biometryCurrentSet),
                context: AuthenticationContext(authenticator: namesOnly, location: location))

            // The helper installed: the same enrollment, identified by its prints too, is adopted.
            let withHelper = FprintdAuthenticator(
                busAddress: real.address, timeout: .seconds(120), enrollmentHelperSocket: helper.socketPath)
            #expect(withHelper.enrollmentHelperIsInstalled)
            let context = AuthenticationContext(authenticator: withHelper, location: location)
            let read = Task { try await keychain.get("token", as: String.self, context: context) }
            try await real.touch("alice")
            #expect(try await read.value == "s3cret")

            // Someone else's finger under the same name: the names do not change, the prints do.
            try await real.deletePrints()
            try await real.enroll("right-index-finger", identity: "mallory")
            #expect(try await namesOnly.enrollment() == before)
            do {
                _ = try await keychain.get("token", as: String.self, context: context)
                Issue.record("the item was read after its finger was enrolled again")
            } catch {
                #expect(error.code == .itemInvalidated, "\(error)")
            }

            // Installed but not answering: not available, never the names alone.
            helper.stop(keepingSocket: true)
            do {
                _ = try await withHelper.enrollment()
                Issue.record("an enrollment was reported without the installed helper")
            } catch {
                #expect(error.code == .biometryNotAvailable, "\(error)")
            }
        } catch {
            Issue.record("\(error)\n\(real.logs())")
        }
    }

    /// The helper's documented answer: HMAC-SHA256 of the tag, then per file (sorted by path) the
    /// path, a NUL, the size (8 bytes, big-endian) and the contents.
    static func expected(_ key: SymmetricKey, _ files: [(String, String)]) -> String {
        var mac = HMAC<SHA256>(key: key)
        mac.update(data: Array("tpm-keychain enrollment v1".utf8) + [0])
        for (path, contents) in files.sorted(by: { $0.0 < $1.0 }) {
            mac.update(data: Array(path.utf8) + [0])
            let size = UInt64(contents.utf8.count)
            mac.update(data: (0..<8).map { UInt8(truncatingIfNeeded: size >> (56 - 8 * $0)) })
            mac.update(data: Array(contents.utf8))
        }
        return Array(mac.finalize()).map { String(format: "%02x", $0) }.joined()
    }
}

/// `tpm-keychain-enrollment listen` on a private socket, over a private print store and key.
final class EnrollmentHelper: @unchecked Sendable {
    static let executable: String = {
        let bundle =
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        return URL(fileURLWithPath: bundle).deletingLastPathComponent().appendingPathComponent(
            "tpm-keychain-enrollment"
        ).path
    }()

    let directory: String
    let prints: String
    var socketPath: String { directory + "/helper.sock" }
    var keyDirectory: String { directory + "/key" }
    var keyPath: String { keyDirectory + "/key" }
    /// A copy of the helper that other users may run (the build directory may be root's alone).
    var publicCopy: String { directory + "/tpm-keychain-enrollment" }
    private var pid: pid_t?

    static func start(prints: String? = nil) throws -> EnrollmentHelper {
        var template = Array("/tmp/enrollment-helper-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw FprintdMockError(description: "mkdtemp: \(Errno.current)") }
        let directory = String(cString: made)
        // Other users reach the socket and the public copy through it.
        chmod(directory, 0o755)
        let helper = EnrollmentHelper(directory: directory, prints: prints ?? directory + "/prints")
        try FileManager.default.createDirectory(atPath: helper.prints, withIntermediateDirectories: true)
        try SystemTool.copyExecutable(executable, to: helper.publicCopy)
        helper.pid = try FprintdMock.spawn(
            executable, ["listen", helper.socketPath, "--prints", helper.prints, "--key", helper.keyPath],
            environment: ["PATH=/usr/bin:/bin"], standardOutput: directory + "/helper.log")
        // Ready once its socket answers (the bound only limits a failure, on a loaded machine).
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            if (try? helper.query(as: nil))?.hasPrefix("1 ") == true { return helper }
            usleep(10_000)
        }
        helper.stop()
        throw FprintdMockError(description: "the enrollment helper did not answer on \(helper.socketPath)")
    }

    private init(directory: String, prints: String) {
        self.directory = directory
        self.prints = prints
    }

    deinit { stop() }

    /// Kills the helper by its PID; unless `keepingSocket`, removes its directory.
    func stop(keepingSocket: Bool = false) {
        if let pid {
            kill(pid, SIGKILL)
            var status: Int32 = 0
            _ = try? retryingInterrupts { waitpid(pid, &status, 0) }
            self.pid = nil
        }
        if !keepingSocket { try? FileManager.default.removeItem(atPath: directory) }
    }

    func writePrint(user: String, _ relative: String, _ contents: Data) throws {
        let path = prints + "/" + user + "/" + relative
        try FileManager.default.createDirectory(
            atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try contents.write(to: URL(fileURLWithPath: path))
    }

    /// The answer to one `request` line, as this process's user.
    func ask(_ request: String) throws -> String {
        let output = try SystemTool.output(
            "/usr/bin/python3",
            [
                "-c",
                "import socket, sys\ns = socket.socket(socket.AF_UNIX)\ns.connect(sys.argv[1])\ns.sendall(sys.argv[2].encode() + b'\\n')\nprint(s.recv(200).decode(), end='')",
                socketPath, request,
            ])
        return String(decoding: output, as: UTF8.self)
    }

    /// `query` as this process's user (nil) or as `user` (runuser).
    func query(as user: String?) throws -> String {
        let output: Data
        if let user {
            output = try SystemTool.output("/usr/sbin/runuser", ["-u", user, "--", publicCopy, "query", socketPath])
        } else {
            output = try SystemTool.output(Self.executable, ["query", socketPath])
        }
        return String(decoding: output, as: UTF8.self)
    }
}

func permissions(_ path: String) -> mode_t {
    var status = stat()
    guard lstat(path, &status) == 0 else { return 0o7777 }
    return status.st_mode & 0o7777
}

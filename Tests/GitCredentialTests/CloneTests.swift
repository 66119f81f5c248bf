import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `git clone` over HTTP from a server that asks for basic authentication: git asks the helper,
/// stores what worked, and erases what the server refused.
@Suite struct CloneTests {
    /// Python's SimpleHTTPRequestHandler serving a directory (a bare repository exported for git's
    /// "dumb" HTTP protocol by `git update-server-info`), answering 401 to any request without the
    /// expected `Authorization: Basic` header. It prints its port, then serves until killed.
    static let server = """
        import base64, http.server, sys
        root, user, password = sys.argv[1], sys.argv[2], sys.argv[3]
        expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, directory=root, **kwargs)
            def authorized(self):
                if self.headers.get("Authorization") == expected:
                    return True
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="git"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return False
            def do_GET(self):
                if self.authorized():
                    super().do_GET()
            def do_HEAD(self):
                if self.authorized():
                    super().do_HEAD()
            def log_message(self, *args):
                pass
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        print(server.server_address[1], flush=True)
        server.serve_forever()
        """

    @Test("a clone asks once, is stored, then needs no prompt; a refused password is erased")
    func cloneWithBasicAuthentication() throws {
        let fixture = try GitFixture()
        let served = fixture.directory + "/served"
        try run(fixture, ["init", "-q", "--bare", "-b", "main", served + "/repo.git"])
        try run(fixture, ["init", "-q", "-b", "main", fixture.directory + "/work"])
        try "hello\n".write(toFile: fixture.directory + "/work/README", atomically: true, encoding: .utf8)
        try run(fixture, ["-C", "work", "add", "README"])
        try run(
            fixture,
            ["-C", "work", "-c", "user.name=Test", "-c", "user.email=test@example.com", "commit", "-q", "-m", "first"])
        try run(fixture, ["-C", "work", "push", "-q", served + "/repo.git", "main"])
        try run(fixture, ["--git-dir", served + "/repo.git", "update-server-info"])

        let script = try fixture.writeScript("server.py", Self.server)
        let refuse = try fixture.writeScript("refuse", "#!/bin/sh\nexit 1")
        let server = Process()
        server.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        server.arguments = [script, served, "askpass-username", "askpass-password"]
        let output = Pipe()
        server.standardOutput = output
        server.standardError = FileHandle.nullDevice
        try server.run()
        defer {
            kill(server.processIdentifier, SIGKILL)
            server.waitUntilExit()
        }
        var portLine = Data()
        while !portLine.contains(UInt8(ascii: "\n")) {
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { throw TestFailure("the HTTP server ended before printing its port") }
            portLine.append(chunk)
        }
        let port = try #require(
            Int(String(decoding: portLine, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)))
        let url = "http://127.0.0.1:\(port)/repo.git"
        let host = ["protocol=http", "host=127.0.0.1:\(port)"]

        // Nothing stored: askpass answers, the clone works, git stores the credential.
        let first = try fixture.git(["clone", "-q", url, "first"])
        #expect(first.status == 0, "\(first)")
        #expect(
            try fixture.takePrompts() == [
                "Username for 'http://127.0.0.1:\(port)': ",
                "Password for 'http://askpass-username@127.0.0.1:\(port)': ",
            ])
        #expect(FileManager.default.fileExists(atPath: fixture.directory + "/first/README"))
        #expect(try fixture.helper("get", host).lines == ["username=askpass-username", "password=askpass-password"])

        // Stored: no prompt (an askpass that refuses would fail the clone).
        let second = try fixture.git(["clone", "-q", url, "second"], environment: ["GIT_ASKPASS": refuse])
        #expect(second.status == 0, "\(second)")
        #expect(FileManager.default.fileExists(atPath: fixture.directory + "/second/README"))

        // A stored password the server refuses: the clone fails and git has the helper erase it.
        try fixture.credential("approve", host + ["username=askpass-username", "password=wrong"])
        let third = try fixture.git(["clone", "-q", url, "third"], environment: ["GIT_ASKPASS": refuse])
        #expect(third.status != 0, "\(third)")
        let after = try fixture.helper("get", host)
        #expect(after.status == 0 && after.stdout.isEmpty, "\(after)")
    }

    private func run(
        _ fixture: GitFixture, _ arguments: [String], sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let result = try runProcess(
            fixture.git, arguments, environment: fixture.environment, directory: fixture.directory)
        guard result.status == 0 else { throw TestFailure("\(result)") }
    }
}

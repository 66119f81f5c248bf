import Foundation
import Testing

/// git's own checks for credential helpers (t/lib-credential.sh's `helper_test`, which t0303 runs
/// against an external helper), through the installed git: `git credential fill`, `approve` and
/// `reject` with this helper configured as a user configures it.
@Suite struct HelperTests {
    /// `git credential fill` with `query`: expects the description back with `username` and
    /// `password`, and exactly `prompts` asked of askpass (none when the helper answered).
    private func expectFill(
        _ fixture: GitFixture, _ query: [String], username: String, password: String, prompts: [String] = [],
        configuration: [String] = [], sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let result = try fixture.credential("fill", query, configuration: configuration, sourceLocation: sourceLocation)
        // git writes protocol, host, path, then username and password.
        let expected = query.filter { !$0.hasPrefix("username=") } + ["username=\(username)", "password=\(password)"]
        #expect(result.lines == expected, "\(result)", sourceLocation: sourceLocation)
        #expect(try fixture.takePrompts() == prompts, sourceLocation: sourceLocation)
    }

    private func expectMiss(
        _ fixture: GitFixture, _ query: [String], url: String, username: String? = nil,
        configuration: [String] = [], sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let withUser = url.replacingOccurrences(of: "://", with: "://\(username ?? "askpass-username")@")
        let prompts = (username == nil ? ["Username for '\(url)': "] : []) + ["Password for '\(withUser)': "]
        try expectFill(
            fixture, query, username: username ?? "askpass-username", password: "askpass-password", prompts: prompts,
            configuration: configuration, sourceLocation: sourceLocation)
    }

    @Test("has no existing data, stores a password, retrieves it")
    func storeThenGet() throws {
        let fixture = try GitFixture()
        try expectMiss(fixture, ["protocol=https", "host=example.com"], url: "https://example.com")
        #expect(!FileManager.default.fileExists(atPath: fixture.store), "a get created the store")
        try fixture.credential(
            "approve", ["protocol=https", "host=example.com", "username=store-user", "password=store-pass"])
        try expectFill(fixture, ["protocol=https", "host=example.com"], username: "store-user", password: "store-pass")
        // In the store, and nowhere in clear.
        let files = regularFiles(under: fixture.store)
        #expect(!files.isEmpty)
        for file in files {
            let bytes = try Data(contentsOf: URL(fileURLWithPath: file))
            #expect(bytes.range(of: Data("store-pass".utf8)) == nil, "\(file) holds the password in clear")
        }
    }

    @Test("requires matching protocol, host, port, username and path")
    func requiresMatches() throws {
        let fixture = try GitFixture()
        try fixture.credential(
            "approve", ["protocol=https", "host=example.com", "username=store-user", "password=store-pass"])
        try expectMiss(fixture, ["protocol=http", "host=example.com"], url: "http://example.com")
        try expectMiss(fixture, ["protocol=https", "host=other.tld"], url: "https://other.tld")
        try expectMiss(fixture, ["protocol=https", "host=example.com:8443"], url: "https://example.com:8443")
        try expectMiss(
            fixture, ["protocol=https", "host=example.com", "username=other"], url: "https://example.com",
            username: "other")

        // The port is part of the host: stored with one, found with it only.
        try fixture.credential(
            "approve", ["protocol=https", "host=example.com:8443", "username=port-user", "password=port-pass"])
        try expectFill(
            fixture, ["protocol=https", "host=example.com:8443"], username: "port-user", password: "port-pass")
        try expectFill(fixture, ["protocol=https", "host=example.com"], username: "store-user", password: "store-pass")

        // credential.useHttpPath: git sends the path, which must match.
        let usePath = ["credential.useHttpPath=true"]
        try fixture.credential(
            "approve", ["protocol=http", "host=path.tld", "path=foo.git", "username=user", "password=pass"],
            configuration: usePath)
        try expectMiss(
            fixture, ["protocol=http", "host=path.tld", "path=bar.git"], url: "http://path.tld/bar.git",
            configuration: usePath)
        try expectFill(
            fixture, ["protocol=http", "host=path.tld", "path=foo.git"], username: "user", password: "pass",
            configuration: usePath)
        // Without the path (useHttpPath off), a credential stored for one repository still serves the host.
        try expectFill(fixture, ["protocol=http", "host=path.tld"], username: "user", password: "pass")
    }

    @Test("overwrites on store, and forgets the overwritten password")
    func overwritesOnStore() throws {
        let fixture = try GitFixture()
        try fixture.credential(
            "approve", ["protocol=https", "host=example.com", "username=user-overwrite", "password=pass1"])
        try fixture.credential(
            "approve", ["protocol=https", "host=example.com", "username=user-overwrite", "password=pass2"])
        try expectFill(
            fixture, ["protocol=https", "host=example.com", "username=user-overwrite"], username: "user-overwrite",
            password: "pass2")
        try fixture.credential(
            "reject", ["protocol=https", "host=example.com", "username=user-overwrite", "password=pass2"])
        try expectMiss(
            fixture, ["protocol=https", "host=example.com", "username=user-overwrite"], url: "https://example.com",
            username: "user-overwrite")
    }

    @Test("stores several users; forgets a user, then the host")
    func multipleUsers() throws {
        let fixture = try GitFixture()
        try fixture.credential("approve", ["protocol=https", "host=example.com", "username=user1", "password=pass1"])
        try fixture.credential("approve", ["protocol=https", "host=example.com", "username=user2", "password=pass2"])
        try fixture.credential(
            "approve", ["protocol=http", "host=example.com", "username=user1", "password=http-pass"])
        try expectFill(
            fixture, ["protocol=https", "host=example.com", "username=user1"], username: "user1", password: "pass1")
        try expectFill(
            fixture, ["protocol=https", "host=example.com", "username=user2"], username: "user2", password: "pass2")

        try fixture.credential("reject", ["protocol=https", "host=example.com", "username=user1"])
        try expectMiss(
            fixture, ["protocol=https", "host=example.com", "username=user1"], url: "https://example.com",
            username: "user1")
        try expectFill(
            fixture, ["protocol=https", "host=example.com", "username=user2"], username: "user2", password: "pass2")

        try fixture.credential("reject", ["protocol=https", "host=example.com"])
        try expectMiss(fixture, ["protocol=https", "host=example.com"], url: "https://example.com")
        // Only what matched is gone: the http credential for the same host stays.
        try expectFill(fixture, ["protocol=http", "host=example.com"], username: "user1", password: "http-pass")
    }

    @Test("does not erase a password distinct from input")
    func eraseNeedsTheSamePassword() throws {
        let fixture = try GitFixture()
        try fixture.credential("approve", ["protocol=https", "host=example.com", "username=user5", "password=pass1"])
        try fixture.credential("reject", ["protocol=https", "host=example.com", "username=user5", "password=pass2"])
        try expectFill(
            fixture, ["protocol=https", "host=example.com", "username=user5"], username: "user5", password: "pass1")
        try fixture.credential("reject", ["protocol=https", "host=example.com", "username=user5", "password=pass1"])
        try expectMiss(
            fixture, ["protocol=https", "host=example.com", "username=user5"], url: "https://example.com",
            username: "user5")
    }

    @Test("can store an empty username and password")
    func emptyUsername() throws {
        let fixture = try GitFixture()
        try fixture.credential("approve", ["protocol=https", "host=sso.tld", "username=", "password="])
        try expectFill(fixture, ["protocol=https", "host=sso.tld"], username: "", password: "")
    }

    @Test("ignores attributes it does not know, from git and in the helper's own input")
    func unknownAttributes() throws {
        let fixture = try GitFixture()
        try fixture.credential(
            "approve",
            [
                "protocol=https", "host=example.com", "username=user", "password=pass",
                "wwwauth[]=Basic realm=\"example\"", "future_attribute=1",
            ])
        try expectFill(fixture, ["protocol=https", "host=example.com"], username: "user", password: "pass")
        // What newer gits send helpers: capabilities, authentication schemes, state.
        try fixture.helper(
            "store",
            [
                "capability[]=authtype", "capability[]=state", "protocol=https", "host=other.tld",
                "wwwauth[]=Bearer realm=\"x\"", "username=other", "password=other-pass", "state[]=x.y",
                "ephemeral=0", "url=https://ignored.tld/", "future_attribute=2",
            ])
        let answer = try fixture.helper(
            "get",
            [
                "capability[]=authtype", "protocol=https", "host=other.tld", "wwwauth[]=Basic realm=\"x\"",
                "future_attribute=3",
            ])
        #expect(answer.lines == ["username=other", "password=other-pass"], "\(answer)")
    }
}

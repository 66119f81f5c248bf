import Foundation
import Testing

/// What every run of the tool pays before it does anything: the libraries the dynamic loader maps.
@Suite("process start")
struct ProcessStartTests {
    @Test(
        "A command that opens no bus does not load libsystemd: it is loaded with the first D-Bus connection, not at start"
    )
    func libsystemdIsLoadedOnlyForABus() throws {
        // glibc's loader names every object it maps on stderr.
        let result = try CLI.run(["--help"], environment: ["LD_DEBUG": "files"])
        #expect(result.status == 0, "\(result)")
        #expect(result.stderr.contains("libtss2-esys.so.0"), "the loader listed nothing: \(result.stderr.prefix(400))")
        #expect(!result.stderr.contains("libsystemd.so.0"), "\(result.stderr)")
    }

    @Test(
        "libcrypto starts without openssl.cnf and its legacy name tables: a broken system OpenSSL configuration does not stop a lookup (it failed as a TPM error before)"
    )
    func brokenOpenSSLConfigurationIsNotRead() throws {
        let fixture = try CLIFixture()
        try fixture.succeed("add-generic-password", "-s", "svc", "-a", "alice", "-w", "secret")
        // With config_diagnostics, libcrypto fails every initialisation that loads this file
        // (a provider that does not exist), and ESAPI's crypto with it.
        let configuration = fixture.directory + "/openssl.cnf"
        try """
        openssl_conf = openssl_init
        config_diagnostics = 1

        [openssl_init]
        providers = provider_sect

        [provider_sect]
        missing = missing_sect

        [missing_sect]
        activate = 1

        """.write(toFile: configuration, atomically: true, encoding: .utf8)
        var environment = fixture.environment
        environment["OPENSSL_CONF"] = configuration
        let result = try CLI.run(
            ["find-generic-password", "--keychain", fixture.store, "-s", "svc", "-a", "alice", "-w"],
            environment: environment)
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout == "secret\n", "\(result)")
    }
}

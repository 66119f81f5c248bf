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
}

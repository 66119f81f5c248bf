import Foundation
import KeychainService
import SystemCalls
import TPMKeychain
import TPMKeychainTesting
import Testing

/// A session holder run inside a process that has other work (this test bundle, a program that
/// embeds it): a lock or its stop erases the keys of the stores it answered from, and leaves the
/// process's other stores open. It used to close every store of the process, which closed other
/// tests' stores under them.
@Suite struct SessionHolderServerTests {
    @Test(
        "stopping a holder closes the stores it answered from and no other: another store of the process still reads with its TPM gone"
    )
    func stopClosesOnlyWhatItServed() throws {
        let other = try TestStore()
        let served = try TestStore()
        let otherKeychain = try other.keychain("kept")
        try otherKeychain.set("still open", forKey: "item")
        try Keychain(service: "face", location: served.location).set("warm", forKey: "item")

        let socket = served.directory + "/session.socket"
        let holder = try SessionHolderServer(socketPath: socket, log: { _ in })
        let serving = try JoinableThread { holder.serve() }
        let probed = try CommandBudgetTests.probe(
            ["keychain", "string(forKey:)", "--keychain", served.location.path, "--tcti", served.simulator.tcti],
            holder: socket)
        #expect(probed == "allowed\n")
        holder.stop()
        serving.join()

        // With both TPMs gone, only a store still open in memory can answer.
        other.simulator.stop()
        served.simulator.stop()
        #expect(try otherKeychain.string(forKey: "item") == "still open")
        #expect(throws: KeychainError.self) {
            _ = try Keychain(service: "face", location: served.location).string(forKey: "item")
        }
    }
}

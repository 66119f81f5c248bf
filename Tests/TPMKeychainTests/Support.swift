import Foundation
import Testing
import TPMKeychain
import TPMKeychainTesting

/// A private swtpm and a fresh store directory for one test; both removed afterwards.
final class TestStore: @unchecked Sendable {
    let simulator: SoftwareTPM
    let directory: String
    let location: KeychainLocation

    init() throws {
        simulator = try SoftwareTPM.start()
        directory = NSTemporaryDirectory() + "tpm-keychain-tests-" + UUID().uuidString
        location = KeychainLocation(path: directory + "/store", tcti: simulator.tcti)
    }

    func keychain(_ service: String = "com.example.tests", accessGroup: String? = nil) throws -> Keychain {
        try Keychain(service: service, accessGroup: accessGroup, location: location)
    }

    deinit {
        Keychain.closeStore(location)
        simulator.stop()
        try? FileManager.default.removeItem(atPath: directory)
    }
}

/// Asserts that `body` throws a ``KeychainError`` with `code`.
func expectKeychainError(_ code: KeychainError.Code, sourceLocation: SourceLocation = #_sourceLocation, _ body: () throws -> Void) {
    do {
        try body()
        Issue.record("expected KeychainError.\(code), but nothing was thrown", sourceLocation: sourceLocation)
    } catch let error as KeychainError {
        #expect(error.code == code, "got \(error)", sourceLocation: sourceLocation)
    } catch {
        Issue.record("expected KeychainError.\(code), got \(error)", sourceLocation: sourceLocation)
    }
}

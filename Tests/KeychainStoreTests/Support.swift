import Foundation
import KeychainVocabulary
import TPM
import TPMKeychainTesting
import Testing

@testable import KeychainStore

/// A private swtpm and a fresh directory for one engine test, with the store opened on the engine
/// directly (no `Keychain`, no `OpenStores`); both removed afterwards.
final class EngineStore: @unchecked Sendable {
    let simulator: SoftwareTPM
    let directory: String
    var path: String { directory + "/store" }

    init() throws {
        simulator = try SoftwareTPM.start()
        directory = NSTemporaryDirectory() + "tpm-keychain-engine-" + UUID().uuidString
    }

    /// Opens (or creates) the store on the simulator; the caller closes it.
    func open() throws -> ItemStore {
        try ItemStore.open(at: path, tpm: TPMConfiguration(tcti: simulator.tcti))
    }

    /// Every item file under the store, sorted.
    func itemFiles() throws -> [String] {
        guard let enumerator = FileManager.default.enumerator(atPath: path) else { return [] }
        return enumerator.compactMap { $0 as? String }.filter { $0.hasSuffix(".item") }.map { path + "/" + $0 }.sorted()
    }

    deinit {
        simulator.stop()
        try? FileManager.default.removeItem(atPath: directory)
    }
}

/// Asserts that `body` throws a ``KeychainError`` with `code`.
func expectKeychainError(
    _ code: KeychainError.Code, sourceLocation: SourceLocation = #_sourceLocation, _ body: () throws -> Void
) {
    let error = #expect(throws: KeychainError.self, sourceLocation: sourceLocation) { try body() }
    #expect(error?.code == code, "got \(String(describing: error))", sourceLocation: sourceLocation)
}

func bytes(of path: String) throws -> [UInt8] {
    Array(try Data(contentsOf: URL(fileURLWithPath: path)))
}

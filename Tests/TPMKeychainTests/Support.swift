import Foundation
import KeychainStore
import TPMKeychain
import TPMKeychainTesting
import Testing

/// A private swtpm and a fresh store directory for one test; both removed afterwards.
final class TestStore: @unchecked Sendable {
    let simulator: SoftwareTPM
    let directory: String
    let location: KeychainLocation

    init() throws {
        simulator = try SoftwareTPM.start()
        directory = NSTemporaryDirectory() + "tpm-keychain-tests-" + UUID().uuidString
        var location = try KeychainLocation(path: directory + "/store", tcti: simulator.tcti)
        location.deviceDirectory = directory + "/device"
        self.location = location
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

/// Asserts that `body` throws a ``KeychainError`` with `code`, and returns it.
@discardableResult
func expectKeychainError(
    _ code: KeychainError.Code, sourceLocation: SourceLocation = #_sourceLocation, _ body: () throws -> Void
) -> KeychainError? {
    do {
        try body()
        Issue.record("expected KeychainError.\(code), but nothing was thrown", sourceLocation: sourceLocation)
    } catch let error as KeychainError {
        #expect(error.code == code, "got \(error)", sourceLocation: sourceLocation)
        return error
    } catch {
        Issue.record("expected KeychainError.\(code), got \(error)", sourceLocation: sourceLocation)
    }
    return nil
}

extension TestStore {
    /// Every regular file under the store, recursively.
    func files() throws -> [String] {
        let root = location.path
        guard let enumerator = FileManager.default.enumerator(atPath: root) else { return [] }
        return enumerator.compactMap { $0 as? String }.map { root + "/" + $0 }.filter { path in
            var isDirectory: ObjCBool = false
            return FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) && !isDirectory.boolValue
        }
    }

    func itemFiles() throws -> [String] {
        try files().filter { $0.hasSuffix(".item") }.sorted()
    }
}

func bytes(of path: String) throws -> [UInt8] {
    Array(try Data(contentsOf: URL(fileURLWithPath: path)))
}

/// Writes `bytes` over an existing file in place, keeping its inode, owner and mode.
func overwrite(_ path: String, with bytes: [UInt8]) throws {
    let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
    defer { try? handle.close() }
    try handle.truncate(atOffset: 0)
    try handle.write(contentsOf: Data(bytes))
}

func mode(of path: String) throws -> Int {
    (try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? NSNumber)?.intValue ?? -1
}

extension Array where Element == UInt8 {
    func containsSubsequence(_ needle: [UInt8]) -> Bool {
        guard !needle.isEmpty, needle.count <= count else { return false }
        for start in 0...(count - needle.count) where self[start] == needle[0] {
            if self[start..<start + needle.count].elementsEqual(needle) { return true }
        }
        return false
    }
}

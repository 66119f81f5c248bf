import Foundation
import TPMKeychainTesting
import Testing

@testable import TPM

/// A private swtpm for one test, stopped when the body returns or throws.
func withSimulator<R>(_ body: (SoftwareTPM, TPMConfiguration) throws -> R) throws -> R {
    let simulator = try SoftwareTPM.start()
    defer { simulator.stop() }
    return try body(simulator, TPMConfiguration(tcti: simulator.tcti))
}

/// A fresh swtpm behind a recording proxy: `body` gets the proxy, a configuration that routes
/// through it, and the simulator itself.
func withRecordingProxy<R>(_ body: (RecordingTPMProxy, TPMConfiguration, SoftwareTPM) throws -> R) throws -> R {
    try withSimulator { simulator, _ in
        let proxy = try RecordingTPMProxy.start(forwardingTo: simulator.port)
        defer { proxy.stop() }
        return try body(proxy, TPMConfiguration(tcti: proxy.tcti), simulator)
    }
}

/// Opens a connection, runs `body`, and closes it (swtpm serves one connection at a time).
func withConnection<R>(
    _ configuration: TPMConfiguration, parameterEncryption: Bool = true,
    _ body: (TPMConnection) throws -> R
) throws -> R {
    let connection = try TPMConnection(configuration, parameterEncryption: parameterEncryption)
    defer { connection.close() }
    return try body(connection)
}

/// ``withRecordingProxy(_:)`` with a lock directory of the test's own inside a scratch
/// directory (`body`'s last argument), so the TPM access lock's note starts empty whatever an
/// earlier run on the same port left.
func withRecordingProxyAndOwnLock<R>(
    _ body: (RecordingTPMProxy, TPMConfiguration, SoftwareTPM, String) throws -> R
) throws -> R {
    try withRecordingProxy { proxy, _, simulator in
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let configuration = TPMConfiguration(tcti: proxy.tcti, lockDirectory: directory + "/locks")
        return try body(proxy, configuration, simulator, directory)
    }
}

/// A recognisable secret: `count` bytes that cannot occur by accident in TPM traffic.
func distinctSecret(_ seed: UInt8, count: Int = 32) -> [UInt8] {
    (0..<count).map { UInt8(truncatingIfNeeded: Int(seed) &+ $0 &* 37 &+ 11) }
}

extension SecretBytes {
    var bytes: [UInt8] { withUnsafeBytes { Array($0) } }
}

extension Array where Element == UInt8 {
    /// Whether `needle` occurs anywhere in this array.
    func containsSubsequence(_ needle: [UInt8]) -> Bool {
        guard !needle.isEmpty, needle.count <= count else { return false }
        for start in 0...(count - needle.count) where self[start] == needle[0] {
            if self[start..<start + needle.count].elementsEqual(needle) { return true }
        }
        return false
    }
}

/// Asserts that `body` throws a ``TPMError`` with `code`.
func expectTPMError(_ code: TPMError.Code, sourceLocation: SourceLocation = #_sourceLocation, _ body: () throws -> Void)
{
    do {
        try body()
        Issue.record("expected TPMError.\(code), but nothing was thrown", sourceLocation: sourceLocation)
    } catch let error as TPMError {
        #expect(error.code == code, "got \(error)", sourceLocation: sourceLocation)
    } catch {
        Issue.record("expected TPMError.\(code), got \(error)", sourceLocation: sourceLocation)
    }
}

/// Runs a tpm2-tools command and fails the test if it fails.
@discardableResult
func tool(
    _ arguments: [String], _ simulator: SoftwareTPM, in directory: String? = nil, input: [UInt8] = [],
    sourceLocation: SourceLocation = #_sourceLocation
) throws -> String {
    let result = try TPM2Tools.run(arguments, tcti: simulator.tcti, workingDirectory: directory, input: input)
    #expect(
        result.status == 0, "\(arguments.joined(separator: " ")): \(result.errorOutput)", sourceLocation: sourceLocation
    )
    return result.output
}

/// The handles `tpm2_getcap handles-<kind>` lists.
func listedHandles(_ kind: String, _ simulator: SoftwareTPM) throws -> [String] {
    try tool(["tpm2_getcap", "handles-\(kind)"], simulator)
        .split(separator: "\n")
        .map { $0.trimmingCharacters(in: CharacterSet(charactersIn: "- ")) }
        .filter { !$0.isEmpty }
}

func temporaryDirectory() throws -> String {
    let path = NSTemporaryDirectory() + "tpm-tests-" + UUID().uuidString
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

struct MissingFixtureValue: Error {}

/// Unwraps a fixture value, failing the test (not trapping) when it is absent.
func required<T>(_ value: T?) throws -> T {
    guard let value else { throw MissingFixtureValue() }
    return value
}

/// tpm2-tools' arguments for the TCG SRK template (EK Credential Profile L-2 with the provisioning
/// guidance's changes). tpm2-tools 5.4 takes the zero-filled unique field only from standard input.
let tcgStorageKeyArguments = [
    "tpm2_createprimary", "-C", "o", "-g", "sha256", "-G", "ecc256:aes128cfb", "-a",
    "decrypt|restricted|fixedtpm|fixedparent|sensitivedataorigin|userwithauth|noda",
    "--unique-data", "-",
]
let tcgStorageKeyUnique = [UInt8](repeating: 0, count: 64)

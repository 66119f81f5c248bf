import Logging
import SystemCalls
import TPMKeychainTesting
import Testing

@testable import TPM

/// Collects what a logger is given.
final class CollectingLogHandler: LogHandler, @unchecked Sendable {
    let records = Locked<[String]>([])
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        records.withLock { $0.append("\(event.level) \(event.message) \(event.metadata ?? [:])") }
    }
}

@Suite struct LoggingTests {
    @Test("the TPM layer logs to the caller's logger, at debug level only, and nothing secret")
    func logsToTheCallersLogger() throws {
        let handler = CollectingLogHandler()
        let logger = Logger(label: "test") { _ in handler }
        try withSimulator { simulator, _ in
            let tpm = try TPMConnection(TPMConfiguration(tcti: simulator.tcti, logger: logger))
            defer { tpm.close() }
            let pin = SecretBytes(copying: Array("pin-that-must-not-be-logged".utf8))
            let (key, sealed) = try tpm.generateSealedKey(authValue: pin)
            #expect(try tpm.unseal(sealed, authValue: pin) == key)
        }
        let records = handler.records.withLock { $0 }
        #expect(records.contains { $0.contains("derived the storage key") }, "\(records)")
        #expect(records.allSatisfy { $0.hasPrefix("debug ") }, "\(records)")
        #expect(!records.contains { $0.contains("pin-that-must-not-be-logged") })
    }
}

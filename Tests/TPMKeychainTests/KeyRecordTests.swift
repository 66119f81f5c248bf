import Crypto
import Foundation
import Testing
@testable import KeychainStore
import TPM
import TPMKeychainTesting

@Suite struct KeyRecordTests {
    static func sealedKey() throws -> (SecretBytes, SealedObject) {
        let simulator = try SoftwareTPM.start()
        defer { simulator.stop() }
        let tpm = try TPMConnection(TPMConfiguration(tcti: simulator.tcti))
        defer { tpm.close() }
        return try tpm.generateSealedKey(authValue: SecretBytes(copying: Array("passcode".utf8)))
    }

    @Test("a key record round-trips, names the policy its key was sealed with, and authenticates every byte")
    func roundTripAndTamper() throws {
        let (_, sealed) = try Self.sealedKey()
        let storeID = [UInt8](repeating: 0xA5, count: 16)
        let metadataKey = SymmetricKey(size: .bits256)
        let record = KeyRecord(storeID: storeID, recordID: [UInt8](repeating: 7, count: 16), accessibility: .whenPasscodeSetThisDeviceOnly,
                               flags: .passcode, sealedKey: sealed)
        let bytes = record.serialized(metadataKey: metadataKey)
        let parsed = try KeyRecord(parsing: bytes, storeID: storeID, metadataKey: metadataKey, path: "record")
        #expect(parsed == record)
        #expect(parsed.policy(counterName: []).digest == sealed.authPolicy)
        #expect(KeyRecord.fileName(record.recordID) == String(repeating: "07", count: 16) + ".key")

        for position in bytes.indices {
            var damaged = bytes
            damaged[position] ^= 0x02
            #expect(throws: StoreError.self, "byte \(position)") {
                _ = try KeyRecord(parsing: damaged, storeID: storeID, metadataKey: metadataKey, path: "record")
            }
        }
        // Another store's key, or a record moved from another store, is refused.
        #expect(throws: StoreError.self) {
            _ = try KeyRecord(parsing: bytes, storeID: storeID, metadataKey: SymmetricKey(size: .bits256), path: "record")
        }
        #expect(throws: StoreError.self) {
            _ = try KeyRecord(parsing: bytes, storeID: [UInt8](repeating: 0, count: 16), metadataKey: metadataKey, path: "record")
        }
    }

    @Test("an NV-bound record's policy compares the counter it names with the value it was bound to")
    func counterBoundPolicy() throws {
        let (_, sealed) = try Self.sealedKey()
        let record = KeyRecord(storeID: [UInt8](repeating: 1, count: 16), recordID: [UInt8](repeating: 2, count: 16),
                               accessibility: .whenUnlocked, flags: [.passcode, .counterBound], counterIndex: 0x0150_0001,
                               counterValue: 41, sealedKey: sealed)
        let name = [UInt8](repeating: 3, count: 34)
        let policy = record.policy(counterName: name)
        #expect(policy.assertions.count == 2)
        #expect(policy.assertions.first == .authValue)
        #expect(policy.assertions.last == .nv(index: 0x0150_0001, indexName: name, operand: [0, 0, 0, 0, 0, 0, 0, 41], offset: 0,
                                              comparison: .equal))
        // Round trip keeps the counter fields; a record with no counter flag must not carry them.
        let key = SymmetricKey(size: .bits256)
        #expect(try KeyRecord(parsing: record.serialized(metadataKey: key), storeID: record.storeID, metadataKey: key, path: "r") == record)
        let inconsistent = KeyRecord(storeID: record.storeID, recordID: record.recordID, accessibility: .whenUnlocked, flags: .passcode,
                                     counterIndex: 5, counterValue: 1, sealedKey: sealed)
        #expect(throws: StoreError.self) {
            _ = try KeyRecord(parsing: inconsistent.serialized(metadataKey: key), storeID: record.storeID, metadataKey: key, path: "r")
        }
    }
}

import Crypto
import Foundation
import KeychainVocabulary
import TPM
import TPMKeychainTesting
import Testing

@testable import KeychainStore

@Suite struct KeyRecordTests {
    static func sealedKey() throws -> SealedObject {
        let simulator = try SoftwareTPM.start()
        defer { simulator.stop() }
        let tpm = try TPMConnection(TPMConfiguration(tcti: simulator.tcti))
        defer { tpm.close() }
        return try tpm.generateSealedKey(policy: Policy([.unsealOnly])).sealed
    }

    static func record(
        sealed: SealedObject?, flags: AccessControl.Flags, accessibility: Accessibility = .whenUnlocked,
        epoch: UInt64 = 0, lockBound: Bool = false
    ) throws -> KeyRecord {
        let passcodeKey = Curve25519.KeyAgreement.PrivateKey().publicKey
        let protection = Protection(try AccessControl(accessibility, flags: flags))
        let wrapped =
            protection.hasPasscodeProtector
            ? try KeyRecord.wrapForPasscode(
                SecretBytes(copying: [UInt8](repeating: 9, count: 32)), passcodeKey: passcodeKey,
                storeID: [UInt8](repeating: 0xA5, count: 16), recordID: [UInt8](repeating: 7, count: 16))
            : nil
        return KeyRecord(
            storeID: [UInt8](repeating: 0xA5, count: 16), recordID: [UInt8](repeating: 7, count: 16),
            accessibility: accessibility,
            flags: lockBound ? .lockBound : [], accessFlags: flags, nvBase: 0x0154_4B00, enrollmentEpoch: epoch,
            passcodeKey: Array(passcodeKey.rawRepresentation), publicKey: [UInt8](repeating: 3, count: 32),
            sealedProtector: protection.hasSealedProtector ? sealed : nil, passcodeProtector: wrapped)
    }

    @Test("a key record round-trips and authenticates every byte; it cannot move to another store")
    func roundTripAndTamper() throws {
        let sealed = try Self.sealedKey()
        let metadataKey = SymmetricKey(size: .bits256)
        let record = try Self.record(
            sealed: sealed, flags: [.biometryCurrentSet, .or, .devicePasscode], epoch: 41, lockBound: true)
        let bytes = record.serialized(metadataKey: metadataKey)
        let parsed = try KeyRecord(parsing: bytes, storeID: record.storeID, metadataKey: metadataKey, path: "record")
        #expect(parsed == record)
        #expect(KeyRecord.fileName(record.recordID) == String(repeating: "07", count: 16) + ".key")
        for position in bytes.indices {
            var damaged = bytes
            damaged[position] ^= 0x02
            #expect(throws: KeychainError.self, "byte \(position)") {
                _ = try KeyRecord(parsing: damaged, storeID: record.storeID, metadataKey: metadataKey, path: "record")
            }
        }
        #expect(throws: KeychainError.self) {
            _ = try KeyRecord(
                parsing: bytes, storeID: record.storeID, metadataKey: SymmetricKey(size: .bits256), path: "record")
        }
        #expect(throws: KeychainError.self) {
            _ = try KeyRecord(
                parsing: bytes, storeID: [UInt8](repeating: 0, count: 16), metadataKey: metadataKey, path: "record")
        }
    }

    @Test(
        "the sealed protector's policy is rebuilt from the record: enrollment epoch, lock state, and PolicyCommandCode(Unseal) only where nothing else is asserted or the record predates 2026-11-27"
    )
    func policyFromFields() throws {
        let record = try Self.record(
            sealed: try Self.sealedKey(), flags: .biometryCurrentSet, accessibility: .afterFirstUnlock, epoch: 41,
            lockBound: true)
        let name = { (index: UInt32) throws(KeychainError) -> [UInt8] in
            [UInt8](repeating: UInt8(index & 0xFF), count: 34)
        }
        let terms: [PolicyAssertion] = [
            .nv(
                index: 0x0154_4B00, indexName: [UInt8](repeating: 0x00, count: 34),
                operand: [0, 0, 0, 0, 0, 0, 0, 41], offset: 0, comparison: .equal),
            .nv(
                index: 0x0154_4B02, indexName: [UInt8](repeating: 0x02, count: 34), operand: [1], offset: 0,
                comparison: .equal),
        ]
        #expect(try record.sealedPolicy(nvName: name).assertions == terms)
        #expect(try record.sealedPolicy(nvName: name, commandCode: true).assertions == terms + [.unsealOnly])
        // A record with nothing else to assert keeps PolicyCommandCode: its policy is never empty.
        let bare = try Self.record(sealed: try Self.sealedKey(), flags: .biometryAny, accessibility: .whenUnlocked)
        #expect(try bare.sealedPolicy { (_) throws(KeychainError) in [] }.assertions == [.unsealOnly])
        // A whenUnlocked record checks byte 1 (unlocked now), an afterFirstUnlock one byte 0.
        let unlocked = try Self.record(
            sealed: try Self.sealedKey(), flags: [], accessibility: .whenUnlocked, lockBound: true)
        let lockOnly = try unlocked.sealedPolicy { (_) throws(KeychainError) in [] }
        #expect(
            lockOnly.assertions.first
                == .nv(index: 0x0154_4B02, indexName: [], operand: [1], offset: 1, comparison: .equal))
    }

    @Test("a record must hold exactly the protectors its protection needs")
    func protectorsMatchProtection() throws {
        let sealed = try Self.sealedKey()
        let key = SymmetricKey(size: .bits256)
        let biometry = try Self.record(sealed: sealed, flags: .biometryAny)
        let withoutSealed = KeyRecord(
            storeID: biometry.storeID, recordID: biometry.recordID, accessibility: .whenUnlocked, flags: [],
            accessFlags: .biometryAny, nvBase: 0, enrollmentEpoch: 0, passcodeKey: biometry.passcodeKey,
            publicKey: biometry.publicKey, sealedProtector: nil, passcodeProtector: nil)
        #expect(throws: KeychainError.self) {
            _ = try KeyRecord(
                parsing: withoutSealed.serialized(metadataKey: key), storeID: biometry.storeID, metadataKey: key,
                path: "r")
        }
        // An epoch on a record that is not biometryCurrentSet is refused.
        let strayEpoch = try Self.record(sealed: sealed, flags: .biometryAny, epoch: 5)
        #expect(throws: KeychainError.self) {
            _ = try KeyRecord(
                parsing: strayEpoch.serialized(metadataKey: key), storeID: biometry.storeID, metadataKey: key, path: "r"
            )
        }
    }

    @Test("the passcode protector opens only with the passcode key it was wrapped to")
    func passcodeProtector() throws {
        let passcodeKey = Curve25519.KeyAgreement.PrivateKey()
        let secret = SecretBytes(copying: [UInt8](repeating: 0x42, count: 32))
        let storeID = [UInt8](repeating: 1, count: 16)
        let recordID = [UInt8](repeating: 2, count: 16)
        let wrapped = try KeyRecord.wrapForPasscode(
            secret, passcodeKey: passcodeKey.publicKey, storeID: storeID, recordID: recordID)
        let record = KeyRecord(
            storeID: storeID, recordID: recordID, accessibility: .whenUnlocked, flags: [], accessFlags: .devicePasscode,
            nvBase: 0, enrollmentEpoch: 0, passcodeKey: Array(passcodeKey.publicKey.rawRepresentation),
            publicKey: [UInt8](repeating: 0, count: 32), sealedProtector: nil, passcodeProtector: wrapped)
        #expect(try record.unwrapPasscodeProtector(passcodeKey, path: "r") == secret)
        #expect(throws: KeychainError.self) {
            _ = try record.unwrapPasscodeProtector(Curve25519.KeyAgreement.PrivateKey(), path: "r")
        }
    }
}

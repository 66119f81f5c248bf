import Crypto
import FoundationEssentials
package import KeychainVocabulary
import SystemCalls
import TPM
import WireFormat

// Purging what can never open again: items and records whose enrollment or passcode the device's
// counters prove gone.
extension ItemStore {
    /// What ``purgeInvalidated(device:)`` removed.
    package struct Purge: Sendable, Equatable {
        package var records = 0
        package var items = 0
    }

    /// Deletes the key records this device can prove will never open again, and every item naming
    /// them. The proof is the TPM's: a counter only moves forward, so a record whose policy names
    /// an enrollment epoch below this device's enrollment counter, or whose passcode key this
    /// device removed while the passcode counter moved past its epoch, is dead for good. Records
    /// of another device, records whose counters are missing (nothing can be proven) and records
    /// with a way in left are kept.
    ///
    /// - Throws: ``KeychainError`` `.tpmUnavailable`, `.tampered`, `.storageFailed`.
    package func purgeInvalidated(device: Device) throws(KeychainError) -> Purge {
        let state = try current()
        let records = try allRecords(state)
        let dead = try device.withConnection { (connection) throws(KeychainError) -> [KeyRecord] in
            guard let deviceState = try device.state(connection) else { return [] }
            var dead: [KeyRecord] = []
            for record in records where try isProvablyDead(record, device: device, deviceState, connection) {
                dead.append(record)
            }
            return dead
        }
        var purge = Purge()
        for record in dead {
            purge.items += try deleteRecordAndItems(record)
            purge.records += 1
        }
        return purge
    }

    private func isProvablyDead(
        _ record: KeyRecord, device: Device, _ deviceState: Device.State, _ connection: TPMConnection
    ) throws(KeychainError) -> Bool {
        guard record.nvBase == deviceState.file.nvBase else { return false } // another device's, or binds none
        let protection = try record.protection()
        let indices = deviceState.indices
        // Only a counter's value, read with the device's authorization, proves anything: an index
        // someone else defined at the handle fails that read, and an ordinary one could say anything.
        func counterValue(_ index: UInt32) throws(KeychainError) -> UInt64? {
            guard try device.isCounter(index, connection) else { return nil }
            do {
                return try device.counter(index, deviceState, connection)
            } catch  where error.code == .notAvailable {
                return nil
            }
        }
        var biometryGone = false
        if protection.biometry == .currentSet, let value = try counterValue(indices.enrollmentCounter) {
            biometryGone = value > record.enrollmentEpoch
        }
        var passcodeGone = false
        if case .retired(let epoch) = try device.standing(ofPasscodeKey: record.passcodeKey, connection),
            let value = try counterValue(indices.passcodeCounter)
        {
            passcodeGone = value > epoch
        }
        if protection.accessibility == .whenPasscodeSetThisDeviceOnly && passcodeGone { return true }
        if protection.needsBothProtectors { return biometryGone || passcodeGone }
        let sealedWayGone = protection.hasSealedProtector ? biometryGone : true
        let passcodeWayGone = protection.hasPasscodeProtector ? passcodeGone : true
        return sealedWayGone && passcodeWayGone
    }

    /// Deletes a record and every item naming it; returns how many items. Only an explicit purge
    /// calls it, never a read.
    private func deleteRecordAndItems(_ record: KeyRecord) throws(KeychainError) -> Int {
        var count = 0
        try withWriteAccess { (state) throws(KeychainError) in
            for group in try state.layout.items.entries() where !group.hasPrefix(".") {
                guard let directory = try Directory.open(group, in: state.layout.items, create: false) else { continue }
                let lock = try directory.lock(".lock", timeout: lockTimeout)
                defer { withExtendedLifetime(lock) {} }
                var removed = false
                for name in try directory.entries() where name.hasSuffix(".item") {
                    guard let file = try directory.openFile(name), file.size >= ItemFileV2.headerSize else { continue }
                    let header = try file.read(count: ItemFileV2.headerSize, at: 0)
                    if Array(header[52..<68]) == record.recordID {
                        let generation = try recordDeletion(of: name, in: directory, group: group)
                        groupDirectories.releaseHeldFiles(inGroup: group)
                        _ = try directory.remove(name, durable: durable)
                        try recordDeletionDone(of: name, group: group, generation: generation)
                        removed = true
                        count += 1
                    }
                }
                if removed { _ = try? directory.stamp() }
            }
            if let records = try Directory.open(state.layout.records, in: rootDirectory, create: false) {
                _ = try records.remove(KeyRecord.fileName(record.recordID), durable: durable)
            }
            forgetCaches()
        }
        return count
    }
}

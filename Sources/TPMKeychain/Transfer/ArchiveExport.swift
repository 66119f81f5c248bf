import Crypto
import Foundation
import KeychainStore
import KeychainVocabulary
import SystemCalls

/// Behind ``KeychainArchive/export(from:to:protection:context:progress:)``: Apple's rule for
/// what may leave, applied to every item of every class, and the archive written as it goes.
enum ArchiveExport {
    static func run(
        _ service: ItemService, to path: String, protection: KeychainArchive.Protection,
        context: AuthenticationContext, progress: (Int) -> Void
    ) async throws(KeychainError) -> KeychainArchive.ExportReport {
        let salt = transferRandomBytes(ArchiveFormat.saltSize)
        let header: ArchiveFormat.Header
        let secret: SymmetricKey
        switch protection {
        case .passphrase(let passphrase, let cost):
            guard cost.isReadable else {
                throw KeychainError(.invalidParameter, "\(cost) is outside what an import accepts")
            }
            guard !passphrase.isEmpty else { throw KeychainError(.invalidParameter, "The passphrase is empty") }
            header = ArchiveFormat.Header(protection: .passphrase(cost), salt: salt)
            secret = try ArchiveFormat.passphraseSecret(Array(passphrase.utf8), cost: cost, salt: salt)
        case .deviceKey(let target):
            // A key made for this archive alone; its private half is dropped when the export ends.
            let ephemeral = P256.KeyAgreement.PrivateKey()
            let recipient: P256.KeyAgreement.PublicKey
            let shared: SharedSecret
            do {
                recipient = try P256.KeyAgreement.PublicKey(x963Representation: target.publicKey)
                shared = try ephemeral.sharedSecretFromKeyAgreement(with: recipient)
            } catch {
                throw KeychainError(.invalidParameter, "The device import key is not usable: \(error)")
            }
            header = ArchiveFormat.Header(
                protection: .deviceKey(
                    fingerprint: Array(SHA256.hash(data: target.publicKey)),
                    ephemeralPublicKey: Array(ephemeral.publicKey.x963Representation)),
                salt: salt)
            secret = shared.withUnsafeBytes { SymmetricKey(data: $0) }
        }
        let key = ArchiveFormat.archiveKey(secret: secret, header: header)

        let file: StreamingOutputFile
        do {
            file = try StreamingOutputFile(creating: path)
        } catch {
            throw KeychainError(
                error.rawValue == EEXIST ? .invalidParameter : .storageFailed,
                "Cannot create \(path): \(error)\(error.rawValue == EEXIST ? " (an export never overwrites a file)" : "")"
            )
        }
        defer { file.abandon() }
        let writer = try ArchiveWriter(file: file, header: header, key: key)
        try writer.append(ArchiveFormat.beginRecord(created: Int64(Date().timeIntervalSince1970 * 1e9)))

        // Items under the master key are written as the store is read; only items bound to the
        // lock state wait for their key records to open (asynchronously), after the walk.
        var report = KeychainArchive.ExportReport()
        var lockBound: [ItemQueryResult] = []
        var done = 0
        try service.forEachItem { (result) throws(KeychainError) in
            done += 1
            progress(done)
            if result.isProtected, let decision = try personOrDevice(result, service) {
                if case .skip(let reason) = decision { report.skip(result, reason) }
                return
            }
            if result.isProtected {
                lockBound.append(result)
                return
            }
            try record(try leaving(result, service, key: nil), writer, &report, result)
        }
        for result in lockBound {
            let key: ItemService.OpenedKey?
            do {
                key = try await service.openKey(for: result, context: context, allowsInteraction: false)
            } catch  where error.code == .interactionNotAllowed {
                report.skip(result, .deviceLocked)
                continue
            } catch  where error.code == .itemInvalidated {
                report.skip(result, .invalidated)
                continue
            }
            try record(try leaving(result, service, key: key), writer, &report, result)
        }
        try writer.append(ArchiveFormat.endRecord(count: UInt64(report.exported)), final: true)
        do {
            try file.finish()
        } catch {
            throw KeychainError(.storageFailed, "Cannot write \(path): \(error)", underlying: error)
        }
        return report
    }

    private enum Decision {
        case leaves(TransferItem)
        case skip(KeychainArchive.SkipReason)
        /// Deleted since the listing.
        case gone
    }

    private static func record(
        _ decision: Decision, _ writer: ArchiveWriter, _ report: inout KeychainArchive.ExportReport,
        _ result: ItemQueryResult
    ) throws(KeychainError) {
        switch decision {
        case .skip(let reason): report.skip(result, reason)
        case .gone: break
        case .leaves(let item):
            try writer.append(ArchiveFormat.itemRecord(item))
            report.exported += 1
        }
    }

    /// Apple's rule for what never leaves, from what the item's file says: nil when it may leave
    /// (its secret readable under the master key or, for a lock-bound item, its opened record).
    private static func personOrDevice(
        _ result: ItemQueryResult, _ service: ItemService
    ) throws(KeychainError) -> Decision? {
        if result.accessibility.isThisDeviceOnly { return .skip(.thisDeviceOnly) }
        if ItemService.holdsTPMKey(result) { return .skip(.livesInTPM) }
        guard result.isProtected else { return nil }
        do {
            if let control = try service.accessControl(of: result), !control.flags.isEmpty {
                return .skip(.accessControl)
            }
        } catch  where error.code == .itemInvalidated {
            return .skip(.invalidated)
        }
        return nil
    }

    /// The item, with its secret, when it may leave.
    private static func leaving(
        _ result: ItemQueryResult, _ service: ItemService, key: ItemService.OpenedKey?
    ) throws(KeychainError) -> Decision {
        if let decision = try personOrDevice(result, service) { return decision }
        guard let secret = try service.secret(of: result, key: key) else { return .gone }
        return .leaves(
            TransferItem(
                itemClass: result.itemClass, accessibility: result.accessibility, attributes: result.attributes,
                value: ItemValue(kind: result.kind, bytes: secret)))
    }
}

extension KeychainArchive.ExportReport {
    mutating func skip(_ result: ItemQueryResult, _ reason: KeychainArchive.SkipReason) {
        skipped.append(
            KeychainArchive.SkippedItem(item: TransferItem.summary(result.itemClass, result.attributes), reason: reason)
        )
    }
}

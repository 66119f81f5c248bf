import Crypto
import FoundationEssentials
import KeychainService
import KeychainVocabulary
import SystemCalls

#if canImport(Glibc)
import Glibc
#endif

/// Behind ``KeychainArchive/export(from:to:protection:context:progress:)``: Apple's rule for
/// what may leave, applied to every item of every class, and the archive written as it goes.
enum ArchiveExport {
    static func run(
        _ service: ItemService, to path: String, protection: KeychainArchive.Protection,
        context: any ProofSource, progress: (Int) -> Void
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
            if let reason = try staying(result, service) {
                report.skip(result, reason)
            } else if result.isProtected {
                lockBound.append(result)
            } else {
                try record(try leaving(result, service, key: nil), writer, &report)
            }
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
            try record(try leaving(result, service, key: key), writer, &report)
        }
        try writer.append(ArchiveFormat.endRecord(count: UInt64(report.exported)), final: true)
        do {
            try file.finish()
        } catch {
            throw KeychainError(.storageFailed, "Cannot write \(path): \(error)", underlying: error)
        }
        return report
    }

    /// Seals `item` into the archive; nil (an item deleted since the walk found it) writes nothing.
    private static func record(
        _ item: TransferItem?, _ writer: ArchiveWriter, _ report: inout KeychainArchive.ExportReport
    ) throws(KeychainError) {
        guard let item else { return }
        var bytes = ArchiveFormat.itemRecord(item)
        defer { bytes.zeroize() }
        try writer.append(bytes)
        report.exported += 1
    }

    /// Apple's rule for what never leaves, from what the item's file and key record say: why
    /// the item stays, or nil when it may leave (read under the master key or, for an item bound
    /// to the lock state, with its opened record).
    private static func staying(
        _ result: ItemQueryResult, _ service: ItemService
    ) throws(KeychainError) -> KeychainArchive.SkipReason? {
        if result.accessibility.isThisDeviceOnly { return .thisDeviceOnly }
        if ItemService.holdsTPMKey(result) { return .livesInTPM }
        guard result.isProtected else { return nil }
        do {
            if let control = try service.accessControl(of: result), !control.flags.isEmpty { return .accessControl }
        } catch  where error.code == .itemInvalidated {
            return .invalidated
        }
        return nil
    }

    /// The item with its secret, for an item that may leave; nil when it was deleted meanwhile.
    private static func leaving(
        _ result: ItemQueryResult, _ service: ItemService, key: ItemService.OpenedKey?
    ) throws(KeychainError) -> TransferItem? {
        guard let secret = try service.secret(of: result, key: key) else { return nil }
        return TransferItem(
            itemClass: result.itemClass, accessibility: result.accessibility, attributes: result.attributes,
            value: ItemValue(kind: result.kind, bytes: secret))
    }
}

extension KeychainArchive.ExportReport {
    mutating func skip(_ result: ItemQueryResult, _ reason: KeychainArchive.SkipReason) {
        skipped.append(
            KeychainArchive.SkippedItem(item: TransferItem.summary(result.itemClass, result.attributes), reason: reason)
        )
    }
}

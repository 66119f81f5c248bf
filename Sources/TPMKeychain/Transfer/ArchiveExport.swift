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
        context: AuthenticationContext, progress: (Int, Int) -> Void
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

        var found: [ItemQueryResult] = []
        for itemClass in ItemClass.allCases {
            found += try service.query(ItemQuery(itemClass: itemClass, synchronizable: .any, limit: .all))
        }
        var report = KeychainArchive.ExportReport()
        for (index, result) in found.enumerated() {
            defer { progress(index + 1, found.count) }
            switch try await leaving(result, service, context) {
            case .skip(let reason):
                report.skipped.append(
                    KeychainArchive.SkippedItem(
                        item: TransferItem.summary(result.itemClass, result.attributes), reason: reason))
            case .gone:
                continue
            case .leaves(let item):
                try writer.append(ArchiveFormat.itemRecord(item))
                report.exported += 1
            }
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

    /// Apple's rule for one item, and its secret when it may leave.
    private static func leaving(
        _ result: ItemQueryResult, _ service: ItemService, _ context: AuthenticationContext
    ) async throws(KeychainError) -> Decision {
        if result.accessibility.isThisDeviceOnly { return .skip(.thisDeviceOnly) }
        if ItemService.holdsTPMKey(result) { return .skip(.livesInTPM) }
        var key: ItemService.OpenedKey?
        if result.isProtected {
            do {
                if let control = try service.accessControl(of: result), !control.flags.isEmpty {
                    return .skip(.accessControl)
                }
                key = try await service.openKey(for: result, context: context, allowsInteraction: false)
            } catch  where error.code == .interactionNotAllowed {
                return .skip(.deviceLocked)
            } catch  where error.code == .itemInvalidated {
                return .skip(.invalidated)
            }
        }
        guard let secret = try service.secret(of: result, key: key) else { return .gone }
        return .leaves(
            TransferItem(
                itemClass: result.itemClass, accessibility: result.accessibility, attributes: result.attributes,
                value: ItemValue(kind: result.kind, bytes: secret)))
    }
}

import Crypto
import FoundationEssentials
import KeychainService
import KeychainVocabulary
import SystemCalls
import TPM

/// Behind ``KeychainArchive/importArchive(at:into:passphrase:conflicts:dryRun:context:progress:)``:
/// a first pass opens and checks every chunk (nothing is written unless all of them open and
/// the end record's count matches); a second pass, re-checking each chunk, writes the items.
enum ArchiveImport {
    static func open(_ path: String) throws(KeychainError) -> StreamingInputFile {
        do {
            return try StreamingInputFile(reading: path)
        } catch {
            throw KeychainError(
                .storageFailed, "Cannot read the archive \(path): \(error)")
        }
    }

    static func run(
        _ path: String, into service: ItemService, passphrase: String?, conflicts: KeychainArchive.ConflictPolicy,
        accessGroups: Set<String>?, dryRun: Bool, context: any ProofSource, progress: (Int, Int) -> Void
    ) async throws(KeychainError) -> KeychainArchive.ImportReport {
        let file = try open(path)
        let header = try ArchiveFormat.Header.read(from: file)
        let key = ArchiveFormat.archiveKey(
            secret: try await secret(header, path: path, passphrase: passphrase, service: service, context: context),
            header: header)
        // The store's own import key opened the archive above; its items are written as a caller
        // entitled to `accessGroups` only.
        let importer = ItemImporter(service: service.entitled(to: accessGroups), conflicts: conflicts)
        var report = KeychainArchive.ImportReport()

        // Pass 1: the whole archive authenticates, its records parse, and it ends where it says.
        var count = 0
        try each(ArchiveReader(file: file, key: key), path: path) { (record) throws(KeychainError) in
            switch record {
            case .begin(let created): report.created = Date(timeIntervalSince1970: Double(created) / 1e9)
            case .item(let item):
                count += 1
                if dryRun { report.planned.append(try importer.plan(item)) }
            case .end: break
            }
        }
        if dryRun { return report }

        // Pass 2: the same chunks, opened again (the file is not trusted to be unchanged), written.
        do {
            try file.rewind()
        } catch {
            throw KeychainError(.storageFailed, "Cannot read the archive \(path) again: \(error)")
        }
        _ = try ArchiveFormat.Header.read(from: file)
        var done = 0
        try each(ArchiveReader(file: file, key: key), path: path) { (record) throws(KeychainError) in
            guard case .item(let item) = record else { return }
            report.record(item, try importer.write(item))
            done += 1
            progress(done, count)
        }
        return report
    }

    /// Reads every record in order, checking the archive's structure: a begin record first,
    /// items, and an end record whose count matches, in the final chunk.
    private static func each(
        _ reader: ArchiveReader, path: String, _ body: (ArchiveFormat.Record) throws(KeychainError) -> Void
    ) throws(KeychainError) {
        var items: UInt64 = 0
        var index = 0
        while case (var bytes, let final)? = try reader.next() {
            defer { bytes.zeroize() }
            let record = try ArchiveFormat.record(bytes, path: path)
            switch (record, index, final) {
            case (.begin, 0, false): break
            case (.item, 1..., false): items += 1
            case (.end(let count), 1..., true):
                guard count == items else {
                    throw KeychainError(.tampered, "\(path) says it holds \(count) items but holds \(items)")
                }
            default:
                throw KeychainError(.tampered, "\(path) has its records out of order")
            }
            try body(record)
            index += 1
        }
    }

    /// The secret the archive key derives from: scrypt of the passphrase, or ECDH in the TPM
    /// with the store's device import key.
    private static func secret(
        _ header: ArchiveFormat.Header, path: String, passphrase: String?, service: ItemService,
        context: any ProofSource
    ) async throws(KeychainError) -> SymmetricKey {
        switch header.protection {
        case .passphrase(let cost):
            guard let passphrase else {
                throw KeychainError(.authenticationFailed, "\(path) is protected by a passphrase; none was given")
            }
            return try ArchiveFormat.passphraseSecret(Array(passphrase.utf8), cost: cost, salt: header.salt)
        case .deviceKey(let fingerprint, let ephemeralPublicKey):
            let wanted = DeviceImportKey.fingerprint(fingerprint)
            guard let (result, publicKey) = try DeviceImportKey.item(of: service) else {
                throw KeychainError(
                    .wrongTPM,
                    "\(path) was made for the device import key \(wanted), and this store has no import key: it opens only on the machine whose TPM holds that key"
                )
            }
            guard Array(SHA256.hash(data: publicKey)) == fingerprint else {
                throw KeychainError(
                    .wrongTPM,
                    "\(path) was made for the device import key \(wanted), not this store's (\(DeviceImportKey.fingerprint(Array(SHA256.hash(data: publicKey))))): it opens only on the machine whose TPM holds that key"
                )
            }
            let key = try await service.openKey(for: result, context: context, allowsInteraction: false)
            let shared = try service.sharedSecret(with: ephemeralPublicKey, using: result, key: key)
            return shared.withUnsafeBytes { SymmetricKey(data: $0) }
        }
    }
}

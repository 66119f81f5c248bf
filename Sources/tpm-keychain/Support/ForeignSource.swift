import CommandLineSupport
import FoundationEssentials
import KeychainTransfer
import KeychainVocabulary
import TPMKeychain
import ToolSupport

#if canImport(Glibc)
import Glibc
#endif

/// Another keyring's export, read into items, and written through the importer that archives use.
enum ForeignSource {
    static func read(_ source: String, format: Import.Format) throws -> ForeignImportReport {
        switch format {
        case .pass:
            let bar = ProgressBar(enabled: isatty(2) == 1)
            defer { bar.finish() }
            return try PassStore.items(directory: source) { done, total in bar.show(done, of: total) }
        case .csv:
            guard let text = try? String(contentsOfFile: source, encoding: .utf8) else {
                throw CommandFailure(ExitStatus.dataError, "\(source) is not readable UTF-8 text")
            }
            return try PasswordManagerExport.items(csv: text)
        case .json:
            guard let data = FileManager.default.contents(atPath: source) else {
                throw CommandFailure(ExitStatus.noInput, "\(source) is not readable")
            }
            return try PasswordManagerExport.items(json: Array(data))
        case .archive:
            preconditionFailure("archives are imported by KeychainArchive")
        }
    }

    static func write(
        _ items: [TransferItem], into location: KeychainLocation, policy: KeychainArchive.ConflictPolicy,
        accessGroups: Set<String>?, dryRun: Bool
    ) throws -> KeychainArchive.ImportReport {
        let service = try ItemService(location: location, caller: AccessCaller(face: .cli))
        let importer = ItemImporter(service: service.entitled(to: accessGroups), conflicts: policy)
        let bar = ProgressBar(enabled: isatty(2) == 1 && !dryRun)
        defer { bar.finish() }
        var report = KeychainArchive.ImportReport()
        for (index, item) in items.enumerated() {
            if dryRun {
                report.planned.append(try importer.plan(item))
                continue
            }
            report.record(item, try importer.write(item))
            bar.show(index + 1, of: items.count)
        }
        return report
    }
}

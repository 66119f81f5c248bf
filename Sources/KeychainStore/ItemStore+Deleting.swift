import Crypto
import FoundationEssentials
package import KeychainVocabulary
import SystemCalls

#if canImport(Glibc)
import Glibc
#endif

// Deleting items: one by identity, or a whole service, each deletion recorded in a protected
// store's manifest before the file goes and marked done after.
extension ItemStore {
    /// Deletes one item. - Returns: false if it did not exist.
    package func delete(_ identity: ItemIdentity) throws(KeychainError) -> Bool {
        try withWriteAccess { (state) throws(KeychainError) -> Bool in
            let names = names(identity, state)
            guard let directory = try groupDirectory(names.group, create: false, state) else { return false }
            let lock = try lockGroup(directory, named: names.group)
            defer { unlock(lock, pooledAs: names.group, in: directory) }
            let generation =
                names.version == 2 ? try recordDeletion(of: names.file, in: directory, group: names.group) : nil
            let removed = try changing(directory, item: HeldItemFile.Key(group: names.group, file: names.file)) {
                () throws(KeychainError) in
                try directory.remove(names.file, durable: durable)
            }
            try recordDeletionDone(of: names.file, group: names.group, generation: generation)
            if !removed { _ = try confirmAbsence(names, state, groupLocked: true) as Bool? }
            return removed
        }
    }

    /// Deletes every item of a service, and temporary files dead writers left. - Returns: how many items.
    package func deleteAll(service: String, accessGroup: String) throws(KeychainError) -> Int {
        try withWriteAccess { (state) throws(KeychainError) -> Int in
            try deleteAll(service: service, accessGroup: accessGroup, state)
        }
    }

    private func deleteAll(service: String, accessGroup: String, _ state: OpenState) throws(KeychainError) -> Int {
        guard
            let directory = try groupDirectory(
                groupName(service: service, accessGroup: accessGroup, state), create: false, state)
        else {
            return 0
        }
        let lock = try directory.lock(".lock", timeout: lockTimeout)
        defer { withExtendedLifetime(lock) {} }
        var removed = 0
        groupDirectories.releaseHeldFiles(inGroup: groupName(service: service, accessGroup: accessGroup, state))
        let names = try directory.entries()
        // In a protected store: every delete recorded (durably) before any file goes, and marked
        // done once all are gone.
        var deletions: [(path: Manifest.ItemPath, generation: UInt64)] = []
        if state.layout.version == 2 && isRollbackProtected {
            let group = groupName(service: service, accessGroup: accessGroup, state)
            for name in names where name.hasSuffix(Manifest.itemSuffix) {
                deletions.append(
                    (Manifest.ItemPath(group: group, file: name), try generationToDelete(name, in: directory)))
            }
            try recordInManifest(.deleting, deletions)
        }
        for name in names {
            if name.hasSuffix(".item") {
                if try directory.remove(name, durable: false) { removed += 1 }
            } else if name.hasSuffix(Directory.temporarySuffix) {
                _ = try directory.remove(name, durable: false)
            }
        }
        if durable && removed > 0 { try directory.sync() }
        try recordInManifest(.deleted, deletions)
        return removed
    }

    /// Records the delete of an item (durably, before its file goes) in a protected store.
    /// - Returns: the generation recorded, for ``recordDeletionDone(of:group:generation:)``.
    @discardableResult
    func recordDeletion(of fileName: String, in directory: Directory, group: String) throws(KeychainError) -> UInt64? {
        guard isRollbackProtected else { return nil }
        let generation = try generationToDelete(fileName, in: directory)
        try recordInManifest(.deleting, [(Manifest.ItemPath(group: group, file: fileName), generation)])
        return generation
    }

    /// Records that a delete's file is gone: from then on, that very version put back is a
    /// restored deleted item, not the leftover of a delete that died.
    func recordDeletionDone(of fileName: String, group: String, generation: UInt64?) throws(KeychainError) {
        guard let generation else { return }
        try recordInManifest(.deleted, [(Manifest.ItemPath(group: group, file: fileName), generation)])
    }

    /// The generation a delete records: the file's or the manifest's, whichever is higher, so
    /// that no copy of any version of the item reads as current afterwards.
    private func generationToDelete(_ fileName: String, in directory: Directory) throws(KeychainError) -> UInt64 {
        let key = Manifest.ItemKey(fileName: fileName)
        var generation = key.flatMap { rollback.recordedGeneration($0) } ?? 0
        if let file = try directory.openFile(fileName), file.size >= ItemFileV2.headerSize {
            let header = try? ItemFileV2.decodeHeader(
                try file.read(count: ItemFileV2.headerSize, at: 0)[...], fileSize: file.size,
                storeID: storeID, path: file.path)
            generation = max(generation, header?.generation ?? 0)
        }
        return generation
    }
}

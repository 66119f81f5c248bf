import KeychainVocabulary
import SystemCalls

#if canImport(Glibc)
import Glibc
#endif

/// An item file kept open from one get to the next, so that reading the item again costs an
/// fstat and a pread, where opening it costs an openat, an fstat, a pread and a close: most of a
/// get's system time. A write holds the file it just put in place, so the first get after it
/// (this process's next read of the item, as often as not) opens nothing either.
///
/// A held descriptor is used again only while nothing can have put another file at its name,
/// which one of two checks shows:
/// - **by name** (`fstatat` of the name, not followed): the entry must be the held file's device
///   and inode. The held descriptor keeps that inode allocated, so no other file can have taken
///   its number meanwhile. This holds whatever the clocks say; it is the check right after a
///   write, and whenever the directory changed since the last check.
/// - **by stamp**, once a check by name was made with the directory settled: its stamp (inode,
///   mtime to the nanosecond) is the one it had then, so no entry was added, removed or renamed
///   since, and the file still has its one link (a writer's rename over it or unlink of it
///   leaves none). A directory's mtime comes from the kernel's coarse clock, and two changes
///   within one of its ticks leave the same mtime: a stamp is kept only once that clock has
///   passed the directory's mtime by ``settling``. An fstat of a descriptor costs less than a
///   lookup by name, and a repeated get is the path a long-lived process takes most.
///
/// Either way a file replaced or removed by any writer, or renamed away with another put at its
/// name (a swap, which only tampering does), is opened again and checked as without holding. Each
/// use repeats the file's own checks (regular file, one link, owner, mode) on a fresh status, the
/// directory's checks are made on its fstat as for every get, and GCM authenticates every byte read.
struct HeldItemFile {
    /// Descriptors one store keeps open at most.
    static let limit = 16
    /// How long a directory must have been left alone before a check by name also vouches for
    /// its stamp.
    static let settling: Int64 = 20_000_000 // nanoseconds

    let directory: Directory
    let name: String
    let file: OpenFile
    /// The directory's stamp at a check by name made once it had settled; nil when there was none.
    let stamp: Directory.Stamp?

    /// Where a held file is found: its group directory's name and its own.
    struct Key: Hashable {
        let group: String
        let file: String
    }

    /// The held file, checked again: by stamp when `current` (the directory's stamp now) is the
    /// one kept, else by name. Nil when the file was replaced or removed, or its name now names
    /// another file or none; `checkedByName` lets the caller keep the stamp once it has settled.
    ///
    /// - Throws: ``KeychainError`` `.unsafeFileSystem` (mode, owner, links), `.storageFailed`.
    func reopen(
        directoryStamp current: Directory.Stamp?
    ) throws(KeychainError) -> (file: OpenFile, checkedByName: Bool)? {
        guard let current, stamp == current else {
            return try directory.reopenFile(name, heldAs: file).map { ($0, true) }
        }
        var status = stat()
        guard fstat(file.descriptor, &status) == 0 else {
            throw KeychainError(.storageFailed, "Cannot inspect \(file.path)", underlying: Errno.current)
        }
        guard status.st_nlink > 0 else { return nil }
        try Directory.checkItemFile(status, path: file.path, sharing: directory.sharing)
        return (OpenFile(owner: file.owner, path: file.path, status: status), false)
    }

    /// Whether the coarse clock has moved far enough past the directory's mtime that a later
    /// change of the directory cannot leave the same stamp.
    static func isSettled(_ stamp: Directory.Stamp) -> Bool {
        var now = timespec()
        guard clock_gettime(CLOCK_REALTIME_COARSE, &now) == 0 else { return false }
        let elapsed =
            (Int64(now.tv_sec) - Int64(stamp.seconds)) * 1_000_000_000 + Int64(now.tv_nsec) - Int64(stamp.nanoseconds)
        return elapsed >= settling
    }
}

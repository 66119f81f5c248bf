import KeychainVocabulary
import SystemCalls

#if canImport(Glibc)
import Glibc
#endif

/// An item file kept open from one get to the next, so that reading the item again costs an
/// fstat and a pread, where opening it costs an openat, an fstat, a pread and a close: most of a
/// get's system time.
///
/// A held descriptor is used again only while nothing can have put another file at its name:
/// - the file still has its one link. A writer replaces an item by renaming a new file over the
///   name, and removes it by unlinking it: either leaves the held inode with no link, whatever
///   the clocks say, and the name is opened again;
/// - its directory is the same open directory, with the stamp (inode, mtime to the nanosecond)
///   it had when the file was held: no entry of it was added, removed or renamed since. So a
///   file renamed away from the name and another put there (a swap, which only tampering does)
///   is opened and found out, as without holding. A directory's mtime comes from the kernel's
///   coarse clock, and two changes within one of its ticks leave the same mtime: a file is held
///   only once that clock has passed the directory's mtime by ``settling``.
///
/// Each use repeats the file's own checks (regular file, one link, owner, mode) on a fresh fstat,
/// and GCM authenticates every byte read, as for a file just opened.
struct HeldItemFile {
    /// Descriptors one store keeps open at most.
    static let limit = 16
    /// How long a directory must have been left alone before its files are held.
    static let settling: Int64 = 20_000_000 // nanoseconds

    let directory: Directory
    let stamp: Directory.Stamp
    let owner: DescriptorOwner
    let path: String

    /// Where a held file is found: its group directory's name and its own.
    struct Key: Hashable {
        let group: String
        let file: String
    }

    /// The held file, checked again; nil when it no longer has its link (replaced or removed).
    ///
    /// - Throws: ``KeychainError`` `.unsafeFileSystem` (mode, owner, links), `.storageFailed`.
    func reopen() throws(KeychainError) -> OpenFile? {
        var status = stat()
        guard fstat(owner.descriptor, &status) == 0 else {
            throw KeychainError(.storageFailed, "Cannot inspect \(path)", underlying: Errno.current)
        }
        guard status.st_nlink > 0 else { return nil }
        try Directory.checkItemFile(status, path: path, sharing: directory.sharing)
        return OpenFile(owner: owner, path: path, status: status)
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

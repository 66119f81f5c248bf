import KeychainVocabulary
import SystemCalls

/// An item file kept open from one get to the next, so that reading the item again costs an
/// fstatat and a pread, where opening it costs an openat, an fstat, a pread and a close: most of a
/// get's system time. A write holds the file it just put in place, so the first get after it
/// (this process's next read of the item, as often as not) opens nothing either.
///
/// A held descriptor is used again only while its name names its inode: the directory's entry
/// for the name is looked up (`fstatat`, not followed) and must be the held file's device and
/// inode. The held descriptor keeps that inode allocated, so no other file can have taken its
/// number meanwhile. So a file replaced (renamed over) or removed by any writer, or renamed away
/// and another put at its name (a swap, which only tampering does), is opened again and checked
/// as without holding, whatever the directory's clocks say. Each use repeats the file's own
/// checks (regular file, one link, owner, mode) on that status, the directory's checks are made
/// on its fstat as for every get, and GCM authenticates every byte read.
struct HeldItemFile {
    /// Descriptors one store keeps open at most.
    static let limit = 16

    let directory: Directory
    let name: String
    let file: OpenFile

    /// Where a held file is found: its group directory's name and its own.
    struct Key: Hashable {
        let group: String
        let file: String
    }

    /// The held file, checked again; nil when its name now names another file or none.
    ///
    /// - Throws: ``KeychainError`` `.unsafeFileSystem` (mode, owner, links).
    func reopen() throws(KeychainError) -> OpenFile? {
        try directory.reopenFile(name, heldAs: file)
    }
}

import FoundationEssentials
import KeychainVocabulary

#if canImport(Glibc)
import Glibc
#endif

// A cheap answer to "did anyone change the items since I last looked?", for readers that keep
// their own view of a store (the Secret Service daemon's attribute index).
extension ItemStore {
    /// Values that change whenever any process adds, replaces or removes an item: the times of
    /// the root and `items2/`, and the manifest's inode and time (a rollback-protected store
    /// renames a new manifest into place on every change). Without a manifest, every group
    /// directory's time too, which costs a listing of `items2/`. A few stat calls otherwise.
    ///
    /// Equal stamps mean no change as far as the file system's timestamps can tell (nanoseconds
    /// on ext4, XFS and tmpfs).
    package func changeStamp() -> [Int64] {
        let items = root + "/" + Self.itemsV2Directory
        var stamp = [Self.modificationTime(root), Self.modificationTime(items)]
        var status = stat()
        if stat(root + "/" + Manifest.fileName, &status) == 0 {
            stamp.append(Int64(status.st_ino))
            stamp.append(Self.nanoseconds(status.st_mtim))
            return stamp
        }
        let groups = (try? FileManager.default.contentsOfDirectory(atPath: items)) ?? []
        for group in groups.sorted() { stamp.append(Self.modificationTime(items + "/" + group)) }
        return stamp
    }

    private static func modificationTime(_ path: String) -> Int64 {
        var status = stat()
        guard stat(path, &status) == 0 else { return -1 }
        return nanoseconds(status.st_mtim)
    }

    private static func nanoseconds(_ time: timespec) -> Int64 {
        Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec)
    }
}

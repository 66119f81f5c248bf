import Foundation
import SystemCalls
#if canImport(Glibc)
import Glibc
#endif

/// The store directory as the CLI sees it, before (and without) opening the store.
enum StoreDirectory {
    /// `path` made absolute against the working directory, `~` expanded, `.` and `..` resolved.
    static func absolute(_ path: String) -> String {
        let expanded = (path as NSString).expandingTildeInPath
        let absolute = expanded.hasPrefix("/") ? expanded : FileManager.default.currentDirectoryPath + "/" + expanded
        return (absolute as NSString).standardizingPath
    }

    /// Creates `path` and any missing parents with mode 0700; existing directories are left as they are.
    ///
    /// - Throws: ``CommandFailure`` when a component cannot be created.
    static func create(_ path: String) throws(CommandFailure) {
        do {
            try createDirectories(path)
        } catch {
            throw CommandFailure(ExitStatus.ioError, "cannot create the directory \(path): \(error)")
        }
    }
}

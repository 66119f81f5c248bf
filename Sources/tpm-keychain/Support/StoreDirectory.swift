import Foundation

/// The store directory as the CLI sees it, before (and without) opening the store.
enum StoreDirectory {
    /// `path` made absolute against the working directory, `~` expanded, `.` and `..` resolved.
    static func absolute(_ path: String) -> String {
        let expanded = (path as NSString).expandingTildeInPath
        let absolute = expanded.hasPrefix("/") ? expanded : FileManager.default.currentDirectoryPath + "/" + expanded
        return (absolute as NSString).standardizingPath
    }
}

import Foundation
import TPMKeychain

/// The store directory as the tools see it, before (and without) opening the store.
package enum StoreDirectory {
    /// `path` made absolute against the working directory, `~` expanded, `.` and `..` resolved.
    package static func absolute(_ path: String) -> String {
        let expanded = (path as NSString).expandingTildeInPath
        let absolute = expanded.hasPrefix("/") ? expanded : FileManager.default.currentDirectoryPath + "/" + expanded
        return KeychainLocation.normalized(absolute)
    }
}

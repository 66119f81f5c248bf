import FoundationEssentials
import TPMKeychain

/// The store directory as the tools see it, before (and without) opening the store.
package enum StoreDirectory {
    /// `path` made absolute against the working directory, `~` expanded, `.` and `..` resolved.
    package static func absolute(_ path: String) -> String {
        let expanded = expandingTilde(path)
        let absolute = expanded.hasPrefix("/") ? expanded : FileManager.default.currentDirectoryPath + "/" + expanded
        return KeychainLocation.normalized(absolute)
    }

    /// `~` and `~/...` against $HOME (else the user database), `~user/...` against that user's
    /// home; anything else, or an unknown user, as it is.
    static func expandingTilde(_ path: String) -> String {
        guard path.hasPrefix("~") else { return path }
        let slash = path.firstIndex(of: "/") ?? path.endIndex
        let user = path[path.index(after: path.startIndex)..<slash]
        let home: String?
        if user.isEmpty {
            home =
                ProcessInfo.processInfo.environment["HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil }
                ?? FileManager.default.homeDirectoryForCurrentUser.path
        } else {
            home = FileManager.default.homeDirectory(forUser: String(user))?.path
        }
        guard let home else { return path }
        return home + path[slash...]
    }
}

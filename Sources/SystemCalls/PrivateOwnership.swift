#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The one check that a file or directory belongs to this user alone: owned by the effective
/// user (what creates the files), with no group or other permission bits.
package enum PrivateOwnership {
    /// The effective user never changes under us; asking the kernel once saves a syscall per file.
    package static let effectiveUser: UInt32 = geteuid()

    package enum Problem: Equatable, Sendable {
        case foreignOwner(UInt32)
        case looseMode(UInt32)
    }

    /// What is wrong with an owner and mode (`st_uid`, `st_mode`) for a private file or directory, or nil.
    package static func problem(owner: UInt32, mode: UInt32) -> Problem? {
        if owner != effectiveUser { return .foreignOwner(owner) }
        if mode & 0o077 != 0 { return .looseMode(mode & 0o777) }
        return nil
    }

    /// Whether `path` (not followed if a symlink) is a directory private to this user.
    package static func isPrivateDirectory(_ path: String) -> Bool {
        var status = stat()
        return lstat(path, &status) == 0 && status.st_mode & S_IFMT == S_IFDIR
            && problem(owner: status.st_uid, mode: status.st_mode) == nil
    }
}

import KeychainVocabulary
import SystemCalls

#if canImport(Glibc)
import Glibc
#endif

/// Who may use a store's files: this user alone, or (an explicit choice when the store was
/// created) the members of one Unix group.
enum Sharing: Sendable, Equatable {
    case owner
    case group(UInt32)

    static let sharedDirectoryMode: mode_t = 0o2770
    static let sharedFileMode: mode_t = 0o660

    /// A store root's sharing, from its mode: shared only in exactly the shape a shared store is
    /// created with, so that no looser directory is taken for one.
    init(rootStatus status: stat) {
        let mode = status.st_mode & 0o7777
        self = mode == Self.sharedDirectoryMode ? .group(status.st_gid) : .owner
    }

    /// Whether user `user` is in group `group` (as their primary group or a supplementary one).
    static func isMember(_ user: uid_t, of group: UInt32) -> Bool {
        guard let entry = getpwuid(user) else { return false }
        if entry.pointee.pw_gid == group { return true }
        var count: Int32 = 64
        var groups = [gid_t](repeating: 0, count: Int(count))
        if getgrouplist(entry.pointee.pw_name, entry.pointee.pw_gid, &groups, &count) < 0 {
            groups = [gid_t](repeating: 0, count: Int(count))
            guard getgrouplist(entry.pointee.pw_name, entry.pointee.pw_gid, &groups, &count) >= 0 else { return false }
        }
        return groups.prefix(Int(count)).contains(group)
    }

    var fileMode: mode_t {
        switch self {
        case .owner: 0o600
        case .group: Self.sharedFileMode
        }
    }
}

/// The store's files belong to this user alone, or to the store's group.
enum Ownership {
    static var effectiveUser: uid_t { PrivateOwnership.effectiveUser }

    /// - Throws: ``KeychainError`` `.unsafeFileSystem`: for a private store, another owner or any
    ///   group/other bits; for a shared one, another group, or any bits for others.
    static func check(_ status: stat, path: String, sharing: Sharing) throws(KeychainError) {
        if case .group(let group) = sharing {
            guard status.st_gid == group else {
                throw KeychainError(
                    .unsafeFileSystem,
                    "\(path) belongs to group \(status.st_gid), not to the store's group (\(group)); refusing to use it"
                )
            }
            guard status.st_mode & 0o007 == 0 else {
                throw KeychainError(
                    .unsafeFileSystem,
                    "\(path) has mode \(String(status.st_mode & 0o7777, radix: 8)); a shared store allows its group and no one else"
                )
            }
            return
        }
        switch PrivateOwnership.problem(owner: status.st_uid, mode: status.st_mode) {
        case nil:
            return
        case .foreignOwner(let owner):
            throw KeychainError(
                .unsafeFileSystem,
                "\(path) belongs to user \(owner), not to this user (\(effectiveUser)); refusing to use it")
        case .looseMode(let mode):
            throw KeychainError(
                .unsafeFileSystem,
                "\(path) has mode \(String(mode, radix: 8)); the keychain requires 0700 directories and 0600 files")
        }
    }
}

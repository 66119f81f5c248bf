import Crypto
import FoundationEssentials
import SystemCalls
import WireFormat

#if canImport(Glibc)
import Glibc
#endif

/// Serialises the processes that share a TPM with no resource manager.
///
/// Without a resource manager every client sees every other client's transient objects and
/// sessions, swtpm has only three object slots, and a crashed process leaves its handles loaded.
/// Holding an exclusive `flock` for the whole life of a connection makes this process the TPM's
/// only user, so whatever is loaded when the lock is taken was left by a process that died, and
/// may be flushed. The kernel drops the lock when its holder dies, however it dies.
///
/// The lock file also carries a note for the next holder: `C` when the last holder closed its
/// connection cleanly, every object and session it loaded flushed, `U` while a holder that found
/// `C` uses the TPM. A holder that dies leaves `U` (or whatever it found), so its successor
/// sweeps; after a clean close, the successor need not ask the TPM what is loaded.
final class TPMAccessLock {
    private let file: LockFile
    /// Whether the previous holder closed cleanly (see above), now noted as in use again.
    let previousHolderClosedCleanly: Bool

    private static let closedCleanly = UInt8(ascii: "C")
    private static let inUse = UInt8(ascii: "U")

    /// - Throws: ``TPMError`` `.busy` when another process holds the TPM past `timeout`, or
    ///   `.invalidArgument` when the lock directory is unsafe (a symlink, another owner, group or
    ///   world access).
    init(configuration: TPMConfiguration) throws(TPMError) {
        let timeout = configuration.timeout
        let deadline = ContinuousClock.now + timeout
        let directory = configuration.lockDirectory
        try Self.prepareDirectory(directory)
        let path = Self.path(tcti: configuration.tcti, in: directory)
        while true {
            let file = try Self.openLockFile(path, in: directory)
            // Bounded, so a process that never lets go surfaces as `.busy`.
            let locked: Bool
            do {
                locked = try file.lock(timeout: max(deadline - ContinuousClock.now, .zero))
            } catch {
                throw TPMError(.other, "Cannot lock \(path): \(error)")
            }
            guard locked else {
                let holder = file.holderProcessID.map { " (process \($0))" } ?? ""
                throw TPMError(
                    .busy,
                    "Another process\(holder) has been using the TPM at \(configuration.tcti) for longer than \(timeout); it holds \(path)"
                )
            }
            // A stopped simulator's lock file is removed (removeUnused(tcti:)): a lock taken on
            // the file removed while this waited excludes nobody, so take the one there now.
            if file.isStill(at: path) {
                self.file = file
                break
            }
        }
        // Trusted only once it is overwritten: otherwise a crash of this process would pass it on.
        previousHolderClosedCleanly = file.firstByte() == Self.closedCleanly && file.setFirstByte(Self.inUse)
    }

    /// The lock file of the TPM at `tcti`: named by a digest of the TCTI string, so one TPM
    /// reached by one string shares one lock.
    static func path(tcti: String, in directory: String) -> String {
        let digest = SHA256.hash(data: Array(tcti.utf8)).prefix(12)
        return directory + "/tcti-" + Array(digest).hexString + ".lock"
    }

    /// Removes the lock file of a TPM that is gone (a simulator that stopped) from `directory`,
    /// unless someone holds it; a process that opened it before sees that it went and takes the
    /// new one.
    ///
    /// - Returns: whether a file was removed.
    @discardableResult
    static func removeUnused(tcti: String, in directory: String) -> Bool {
        LockFile.removeIfUnused(path(tcti: tcti, in: directory))
    }

    /// Removes the lock files in `directory` that nobody has taken for `age` and nobody holds:
    /// those of simulators stopped before their files were removed with them (every test run
    /// of earlier versions left one per simulator). A TPM still in use has its file written at
    /// each connection (the note above), so only files of TPMs unused that long go, and a later
    /// user of such a TPM makes a new one.
    ///
    /// - Returns: how many were removed.
    @discardableResult
    static func removeStale(in directory: String, olderThan age: Duration) -> Int {
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return 0 }
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let cutoff = Int64(now.tv_sec) - age.components.seconds
        var removed = 0
        for entry in entries where entry.hasPrefix("tcti-") && entry.hasSuffix(".lock") {
            let path = directory + "/" + entry
            var status = stat()
            guard lstat(path, &status) == 0, status.st_mode & S_IFMT == S_IFREG,
                Int64(status.st_mtim.tv_sec) < cutoff
            else { continue }
            if LockFile.removeIfUnused(path) { removed += 1 }
        }
        return removed
    }

    /// Notes for the next holder that this one flushed everything it loaded.
    func recordCleanClose() {
        file.setFirstByte(Self.closedCleanly)
    }

    /// The lock file, making its directory again when it went since this process prepared it
    /// (a runtime directory is removed when its user's last session ends).
    private static func openLockFile(_ path: String, in directory: String) throws(TPMError) -> LockFile {
        var madeAgain = false
        while true {
            do throws(Errno) {
                return try LockFile(path)
            } catch  where error.rawValue == ENOENT && !madeAgain {
                madeAgain = true
                preparedDirectories.withLock { _ = $0.remove(directory) }
                try prepareDirectory(directory)
            } catch {
                throw TPMError(.invalidArgument, "Cannot open the TPM lock file \(path): \(error)")
            }
        }
    }

    /// Lock directories made or found private by this process. They stay so: their parents are
    /// this user's, so nobody else can replace them, and every lock file is opened O_NOFOLLOW.
    private static let preparedDirectories = Locked<Set<String>>([])

    private static func prepareDirectory(_ path: String) throws(TPMError) {
        if preparedDirectories.withLock({ $0.contains(path) }) { return }
        // Parents such as ~/.cache may not exist yet; existing ones are left as they are.
        let parent = String(path[..<(path.lastIndex(of: "/") ?? path.startIndex)])
        if !parent.isEmpty { try? createDirectories(parent) }
        if mkdir(path, 0o700) != 0 && errno != EEXIST {
            throw TPMError(
                .invalidArgument, "Cannot create the TPM lock directory \(path): \(String(cString: strerror(errno)))")
        }
        guard PrivateOwnership.isPrivateDirectory(path) else {
            throw TPMError(
                .invalidArgument,
                "The TPM lock directory \(path) must be a directory owned by this user with mode 0700, and it is not (another user may have created it); remove it, or set XDG_RUNTIME_DIR to a private directory"
            )
        }
        preparedDirectories.withLock { _ = $0.insert(path) }
    }
}

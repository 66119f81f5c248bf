import Crypto
package import SystemCalls
import WireFormat

#if canImport(Glibc)
import Glibc
#endif

/// Who a caller is, as the kernel tells it: the process (held by a pidfd while it is read), the
/// executable it runs and that file's SHA-256, its ancestors up to its session's leader, its
/// systemd unit and its Flatpak application id. Every fact comes from /proc or the socket, never
/// from the caller's own word, and is kept only if the process was still running after it was
/// read (``PinnedProcess``). What prompts and logs show, and what grants can name.
package struct CallerIdentity: Sendable, Hashable {
    /// One process of the chain.
    package struct Member: Sendable, Hashable {
        package let pid: Int32
        /// /proc/PID/exe; nil when it could not be read (another user's process, a kernel thread).
        package let executable: String?

        /// The executable's file name, or the pid for a process whose executable is unknown.
        package var name: String {
            executable.map { String($0.split(separator: "/").last ?? Substring($0)) } ?? "pid \(pid)"
        }
    }

    package let uid: UInt32
    package let process: Member
    /// The SHA-256 of the file the process runs, read through /proc/PID/exe (the file itself,
    /// also when replaced or deleted since): the same bytes have the same hash wherever they lie.
    package let executableHash: [UInt8]?
    /// Parent first, up to the session leader (or init), at most ``deepestAncestry``.
    package let ancestors: [Member]
    /// /proc/PID/cgroup's last `.service` or `.scope`.
    package let unit: String?
    /// `/.flatpak-info` in the process's own root.
    package let flatpakApplicationID: String?
    /// The boot and the kernel's audit session of the process (``GrantBook/loginSession(ofProcess:)``).
    package let loginSession: String?

    /// `bash → node → secret-tool`: the ancestors from the top, then the process.
    package let chain: String
    /// For people and logs, after the program's name: the pid, the chain that led to it, the
    /// unit and the app id where there are any, and the executable's hash, shortened. Names are
    /// quoted and escaped (DisplayText): a program chooses its own file name. Made once with the
    /// identity, which is kept by incarnation: every signature's log line names its caller.
    package let details: String

    /// How far up the chain is followed.
    package static let deepestAncestry = 16

    init(
        uid: UInt32, process: Member, executableHash: [UInt8]?, ancestors: [Member], unit: String?,
        flatpakApplicationID: String?, loginSession: String? = nil
    ) {
        self.uid = uid
        self.process = process
        self.executableHash = executableHash
        self.ancestors = ancestors
        self.unit = unit
        self.flatpakApplicationID = flatpakApplicationID
        self.loginSession = loginSession
        let chain = (ancestors.reversed() + [process]).map(\.name).joined(separator: " → ")
        self.chain = chain
        var parts = ["pid \(process.pid)"]
        if !ancestors.isEmpty { parts.append("via " + DisplayText.quoted(chain, limit: 300)) }
        if let unit { parts.append("unit " + DisplayText.quoted(unit, limit: 100)) }
        if let flatpakApplicationID { parts.append("app " + DisplayText.quoted(flatpakApplicationID, limit: 100)) }
        if let executableHash { parts.append("sha256 " + executableHash.prefix(8).hexString) }
        details = parts.joined(separator: ", ")
    }

    /// What grants can name of it (``Grant/Subject``).
    package var facts: CallerFacts {
        CallerFacts(
            executable: process.executable, executableHash: executableHash, unit: unit,
            applicationID: flatpakApplicationID, ancestors: ancestors.compactMap(\.executable),
            loginSession: loginSession, pid: process.pid)
    }

    /// Reads the identity of `process` for a caller of user `uid`; nil when the process ended
    /// before its facts were confirmed (they could be another's, under a reused pid).
    package static func of(_ process: PinnedProcess, uid: UInt32) -> CallerIdentity? {
        // A process that connects again (a browser's PKCS#11 module, a long-lived client) is
        // read once: the same pid, start time and executable file are the same process, as it was.
        let incarnation = process.incarnation
        if let incarnation, let known = known.withLock({ $0[process.pid] }), known.incarnation == incarnation,
            known.identity.uid == uid
        {
            return process.isAlive ? known.identity : nil
        }
        guard let identity = read(process, uid: uid) else { return nil }
        if let incarnation {
            known.withLock { known in
                if known.count >= 256 { known.removeAll() }
                known[process.pid] = (incarnation, identity)
            }
        }
        return identity
    }

    /// The identities read so far, by pid, with the incarnation they were read of.
    private static let known = Locked<[Int32: (incarnation: [UInt64], identity: CallerIdentity)]>([:])

    private static func read(_ process: PinnedProcess, uid: UInt32) -> CallerIdentity? {
        let executable = process.executable
        let hash = process.openExecutable().flatMap { descriptor in
            defer { close(descriptor) }
            return ExecutableHashes.hash(of: descriptor)
        }
        var ancestors: [Member] = []
        var current = process.parentAndSession
        while let (parent, session) = current, parent > 0, ancestors.count < deepestAncestry {
            ancestors.append(Member(pid: parent, executable: executablePath(ofProcess: parent)))
            // The session leader is the chain's top: above it is the login's own machinery.
            if parent == session || parent == 1 { break }
            current = PinnedProcess(pid: parent)?.parentAndSession
        }
        let identity = CallerIdentity(
            uid: uid, process: Member(pid: process.pid, executable: executable), executableHash: hash,
            ancestors: ancestors, unit: process.systemdUnit, flatpakApplicationID: process.flatpakApplicationID,
            loginSession: GrantBook.loginSession(ofProcess: process.pid))
        return process.isAlive ? identity : nil
    }
}

/// The SHA-256 of executables, remembered by file (device, inode, size, change time) so that a
/// caller's hash costs a stat after the first time, however large its executable.
package enum ExecutableHashes {
    private struct File: Hashable {
        let device: UInt64
        let inode: UInt64
        let size: Int64
        let changed: Int64
    }

    private static let known = Locked<[File: [UInt8]]>([:])
    /// Larger files are not hashed (nil): no executable is that large, and reading one would stall the caller.
    static let largest: Int64 = 1 << 30

    /// The SHA-256 of the regular file at `path` (followed if a link): what a grant for a
    /// program names, as the caller's hash will be read through /proc/PID/exe.
    package static func hash(ofFileAt path: String) -> [UInt8]? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        return hash(of: descriptor)
    }

    static func hash(of descriptor: Int32) -> [UInt8]? {
        var status = stat()
        guard fstat(descriptor, &status) == 0, status.st_mode & S_IFMT == S_IFREG, Int64(status.st_size) <= largest
        else { return nil }
        let file = File(
            device: UInt64(status.st_dev), inode: UInt64(status.st_ino), size: Int64(status.st_size),
            changed: Int64(status.st_ctim.tv_sec) * 1_000_000_000 + Int64(status.st_ctim.tv_nsec))
        if let hash = known.withLock({ $0[file] }) { return hash }
        var hasher = SHA256()
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        var offset: off_t = 0
        while true {
            let count = buffer.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, $0.count, offset) }
            if count < 0, errno == EINTR { continue }
            guard count >= 0 else { return nil }
            if count == 0 { break }
            hasher.update(data: buffer[..<count])
            offset += off_t(count)
        }
        let hash = Array(hasher.finalize())
        known.withLock { known in
            if known.count >= 256 { known.removeAll() }
            known[file] = hash
        }
        return hash
    }
}

extension AccessCaller {
    /// The peer of a Unix-socket connection that a face serving other programs (the ssh agent,
    /// the passkey authenticator) answers: its uid and pid from SO_PEERCRED, and what the kernel
    /// says of it (``CallerIdentity``), read while the process is held by its pidfd; the
    /// executable from /proc/PID/exe when the identity could not be confirmed.
    package static func peer(
        of connection: Int32, pid: Int32, uid: UInt32, face: Face
    ) -> (caller: AccessCaller, identity: CallerIdentity?) {
        let identity = PinnedProcess(peerOf: connection, pid: pid).flatMap { CallerIdentity.of($0, uid: uid) }
        let caller = AccessCaller(
            face: face, uid: uid, source: .peerCredentials,
            executable: identity?.process.executable ?? executablePath(ofProcess: pid), facts: identity?.facts)
        return (caller, identity)
    }

    /// The program as the person asked reads it: its path quoted and escaped, then its pid and
    /// what the kernel says of where it comes from.
    package static func describe(executable: String?, identity: CallerIdentity?, pid: Int32) -> String {
        (executable.map { DisplayText.quoted($0, limit: 200) } ?? "an unknown program") + " ("
            + (identity?.details ?? "pid \(pid)") + ")"
    }
}

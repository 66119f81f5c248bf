import CSystemCalls

#if canImport(Glibc)
import Glibc
#endif

/// A process held by a pidfd, so that what is read of it through /proc/PID can be checked to be
/// of it: a pid is reused only after its process ends, and ``isAlive`` after the reads says it
/// has not ended. Each fact below is read from the kernel (/proc), never from the process's word.
package final class PinnedProcess: Sendable {
    package let pid: Int32
    private let descriptor: Int32

    /// The peer of a connected Unix socket, whose pid `pid` is (``peerCredentials(of:)``): its
    /// pidfd from the kernel (SO_PEERPIDFD) where the kernel has it, else one opened for the pid;
    /// nil when neither.
    package convenience init?(peerOf socket: Int32, pid: Int32) {
        let taken = tk_peer_pidfd(socket)
        if taken >= 0 {
            self.init(pid: pid, descriptor: taken)
        } else {
            self.init(pid: pid)
        }
    }

    /// Process `pid`, held from now on; nil when it has ended or cannot be held.
    package convenience init?(pid: Int32) {
        let descriptor = tk_pidfd_open(pid)
        guard descriptor >= 0 else { return nil }
        self.init(pid: pid, descriptor: descriptor)
    }

    private init(pid: Int32, descriptor: Int32) {
        self.pid = pid
        self.descriptor = descriptor
    }

    deinit { close(descriptor) }

    /// Whether the process still runs: facts read before a true answer are its own.
    package var isAlive: Bool { tk_pidfd_check_alive(descriptor) == 0 }

    /// /proc/PID/exe: the executable's path as the kernel recorded it at exec.
    package var executable: String? { executablePath(ofProcess: pid) }

    /// /proc/PID/exe opened: the very file the process runs (also when it was replaced or
    /// deleted since), read-only; nil when it cannot be opened.
    package func openExecutable() -> Int32? {
        let descriptor = open("/proc/\(pid)/exe", O_RDONLY | O_CLOEXEC)
        return descriptor >= 0 ? descriptor : nil
    }

    /// The parent's pid and the session's id (/proc/PID/stat, fields 4 and 6).
    package var parentAndSession: (parent: Int32, session: Int32)? {
        status.map { ($0.parent, $0.session) }
    }

    /// What tells this process from any other that ever had its pid, and from itself before an
    /// exec: the kernel's number for it (its pidfd's inode on pidfs), else its start time
    /// (/proc/PID/stat, field 22); and its executable's device and inode.
    package var incarnation: [UInt64]? {
        // The pidfd's own number where the kernel gives one: no /proc/PID/stat to read.
        let processID = tk_pidfd_process_id(descriptor)
        guard let identifier = processID != 0 ? UInt64(processID) : status?.startTime,
            let executableFile = openExecutable()
        else { return nil }
        defer { close(executableFile) }
        var executable = stat()
        guard fstat(executableFile, &executable) == 0 else { return nil }
        return [processID != 0 ? 1 : 0, identifier, UInt64(executable.st_dev), UInt64(executable.st_ino)]
    }

    /// /proc/PID/stat's parent, session and start time.
    private var status: (parent: Int32, session: Int32, startTime: UInt64)? {
        guard let stat = Self.read("/proc/\(pid)/stat", limit: 4096),
            let end = stat.lastIndex(of: ")")
        else { return nil }
        // After the command name in parentheses (which may hold anything): state (field 3),
        // ppid, pgrp, session, ... starttime (field 22).
        let fields = stat[stat.index(after: end)...].split(separator: " ")
        guard fields.count > 19, let parent = Int32(fields[1]), let session = Int32(fields[3]),
            let startTime = UInt64(fields[19])
        else { return nil }
        return (parent, session, startTime)
    }

    /// The systemd unit the process runs in: the last `.service` or `.scope` of its cgroup v2
    /// path (/proc/PID/cgroup); nil outside a unit.
    package var systemdUnit: String? {
        Self.read("/proc/\(pid)/cgroup", limit: 16384).flatMap(Self.unit(inCgroups:))
    }

    /// The last `.service` or `.scope` of the cgroup v2 line (`0::/…`) of a /proc/PID/cgroup text.
    package static func unit(inCgroups text: String) -> String? {
        for line in text.split(separator: "\n") where line.hasPrefix("0::") {
            return line.dropFirst(3).split(separator: "/").last { $0.hasSuffix(".service") || $0.hasSuffix(".scope") }
                .map(String.init)
        }
        return nil
    }

    /// The Flatpak application id of a sandboxed process: `name=` of `[Application]` in the
    /// `/.flatpak-info` of its own root (/proc/PID/root), which the sandbox cannot rewrite; nil
    /// for a process outside Flatpak.
    package var flatpakApplicationID: String? {
        Self.read("/proc/\(pid)/root/.flatpak-info", limit: 65536).flatMap(Self.flatpakApplicationID(inInfo:))
    }

    /// `name=` of the `[Application]` group of a `.flatpak-info` text.
    package static func flatpakApplicationID(inInfo info: String) -> String? {
        var inApplication = false
        for line in info.split(separator: "\n") {
            let trimmed = line.trimmedOfBlanks
            if trimmed.hasPrefix("[") {
                inApplication = trimmed == "[Application]"
            } else if inApplication, let equals = trimmed.firstIndex(of: "="),
                trimmed[..<equals].trimmedOfBlanks == "name"
            {
                // A key file (GKeyFile) allows blanks around the "=".
                let name = trimmed[trimmed.index(after: equals)...].trimmedOfBlanks
                return name.isEmpty ? nil : String(name)
            }
        }
        return nil
    }

    /// At most `limit` bytes of a /proc file as text; nil when it cannot be opened.
    private static func read(_ path: String, limit: Int) -> String? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        return String(decoding: readToEnd(descriptor, atMost: limit), as: UTF8.self)
    }
}

extension Substring {
    /// Without leading and trailing blanks (spaces, tabs, carriage returns).
    fileprivate var trimmedOfBlanks: Substring {
        let isBlank: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\r" }
        guard let first = firstIndex(where: { !isBlank($0) }), let last = lastIndex(where: { !isBlank($0) }) else {
            return ""
        }
        return self[first...last]
    }
}

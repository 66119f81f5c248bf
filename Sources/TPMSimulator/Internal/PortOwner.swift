import FoundationEssentials
import SystemCalls
import WireFormat

#if canImport(Glibc)
import Glibc
#endif

/// Which process listens on a loopback TCP port, from the kernel's socket table: how a starting
/// swtpm is told from another one that already serves the port it was handed (both answer a
/// probe; only ours may be used).
enum PortOwner {
    /// Whether `pid` holds the socket listening on 127.0.0.1:`port`; nil when /proc cannot say
    /// (not mounted, the table lists no such socket yet, or the child's descriptors may not be
    /// listed, as under a strict ptrace policy): the caller then goes by the answer alone.
    static func isListening(pid: pid_t, port: Int) -> Bool? {
        guard let inode = listeningInode(port: port) else { return nil }
        let directory = "/proc/\(pid)/fd"
        guard let stream = opendir(directory) else {
            // Not allowed to look: cannot say. Gone (the child died of the port it lost): no.
            return errno == EACCES || errno == EPERM ? nil : false
        }
        defer { closedir(stream) }
        let target = "socket:[\(inode)]"
        while let entry = readdir(stream) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) {
                String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name == "." || name == ".." { continue }
            if (try? FileManager.default.destinationOfSymbolicLink(atPath: directory + "/" + name)) == target {
                return true
            }
        }
        return false
    }

    /// The inode of the socket listening on 127.0.0.1:`port`, from /proc/net/tcp (columns:
    /// sl, local address as hex IP:port, remote address, state 0A = LISTEN, ..., inode tenth).
    private static func listeningInode(port: Int) -> String? {
        guard let table = try? String(contentsOfFile: "/proc/net/tcp", encoding: .utf8) else { return nil }
        let local = "0100007F:" + port.hexString(width: 4).uppercased()
        for line in table.split(separator: "\n").dropFirst() {
            let columns = line.split(separator: " ", omittingEmptySubsequences: true)
            if columns.count > 9, columns[1] == local, columns[3] == "0A" { return String(columns[9]) }
        }
        return nil
    }
}

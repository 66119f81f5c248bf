import Foundation
import SystemCalls

/// Which process listens on a loopback TCP port, from the kernel's socket table: how a starting
/// swtpm is told from another one that already serves the port it was handed (both answer a
/// probe; only ours may be used).
enum PortOwner {
    /// Whether `pid` holds the socket listening on 127.0.0.1:`port`; nil when /proc cannot say
    /// (not mounted, or the table lists no such socket yet).
    static func isListening(pid: pid_t, port: Int) -> Bool? {
        guard let inode = listeningInode(port: port) else { return nil }
        guard let descriptors = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd") else { return false }
        let target = "socket:[\(inode)]"
        return descriptors.contains { (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\($0)")) == target }
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

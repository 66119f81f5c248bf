import Crypto
import DBus
import Foundation
import WireFormat

#if canImport(Glibc)
import Glibc
#endif

/// A record of accesses, off by default: when, who (uid, pid, executable and the SHA-256 of its
/// file), what, and the collection's and item's labels. Never a secret, never an attribute value.
final class AuditLog {
    private let handle: FileHandle
    /// Executables' digests by path, kept while the file's inode, size and time are the same.
    private var digests: [String: (stamp: [Int64], digest: String)] = [:]

    /// Appends to `path` (created 0600).
    init(path: String) throws {
        if !FileManager.default.fileExists(atPath: path) {
            guard FileManager.default.createFile(atPath: path, contents: nil, attributes: [.posixPermissions: 0o600])
            else { throw SecretServiceError(.failed, "The audit log \(path) could not be created") }
        }
        guard let handle = FileHandle(forWritingAtPath: path) else {
            throw SecretServiceError(.failed, "The audit log \(path) could not be opened")
        }
        handle.seekToEndOfFile()
        self.handle = handle
    }

    func record(peer: BusPeer, action: String, collection: String, item: String?) {
        var line = "uid=\(peer.uid) pid=\(peer.pid) exe=\(DisplayText.quoted(peer.executable ?? "?"))"
        if let executable = peer.executable { line += " exe_sha256=\(digest(of: executable))" }
        line += " \(action)"
        line += " collection=\(DisplayText.quoted(collection))"
        if let item { line += " item=\(DisplayText.quoted(item))" }
        write(line)
    }

    /// An event no caller is present for (a prompt that ended after its caller left).
    func record(event: String, collection: String) {
        write("\(event) collection=\(DisplayText.quoted(collection))")
    }

    private func write(_ line: String) {
        let time = ISO8601DateFormatter().string(from: Date())
        handle.write(Data((time + " " + line + "\n").utf8))
    }

    /// The SHA-256 of the file at `path` ("?" when it cannot be read), hashed once per version.
    private func digest(of path: String) -> String {
        var status = stat()
        guard stat(path, &status) == 0 else { return "?" }
        let stamp = [
            Int64(status.st_ino), Int64(status.st_size), Int64(status.st_mtim.tv_sec), Int64(status.st_mtim.tv_nsec),
        ]
        if let known = digests[path], known.stamp == stamp { return known.digest }
        guard let contents = FileManager.default.contents(atPath: path) else { return "?" }
        let digest = Array(SHA256.hash(data: contents)).hexString
        digests[path] = (stamp, digest)
        return digest
    }
}

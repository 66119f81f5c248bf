import DBus
import Foundation
import TPMKeychain
import WireFormat

#if canImport(Glibc)
import Glibc
#endif

/// A record of accesses, off by default: when, who (uid, pid, executable and the SHA-256 of its
/// file, the chain of processes that started it, its unit and Flatpak app id: CallerIdentity),
/// what, and the collection's and item's labels. Never a secret, never an attribute value.
final class AuditLog {
    private let handle: FileHandle

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
        // What the kernel says of the caller: the file it runs (hashed through /proc/PID/exe,
        // not by path), the chain that started it, its unit and its Flatpak app id. The bus
        // gives a pid, not a pidfd (dbus 1.14): it is held from here, while the caller waits.
        let identity = peer.identity
        var line =
            "uid=\(peer.uid) pid=\(peer.pid) exe=\(DisplayText.quoted(identity?.process.executable ?? peer.executable ?? "?"))"
        line += " exe_sha256=\(identity?.executableHash?.hexString ?? "?")"
        if let identity, !identity.ancestors.isEmpty { line += " chain=\(DisplayText.quoted(identity.chain))" }
        if let unit = identity?.unit { line += " unit=\(DisplayText.quoted(unit))" }
        if let app = identity?.flatpakApplicationID { line += " app=\(DisplayText.quoted(app))" }
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
}

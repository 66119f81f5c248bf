import DBus
import FoundationEssentials
import SystemCalls
import TPMKeychain
import WireFormat

#if canImport(Glibc)
import Glibc
#endif

/// A record of accesses, off by default: when, who (uid, pid, executable and the SHA-256 of its
/// file, the chain of processes that started it, its unit and Flatpak app id: CallerIdentity),
/// what, and the collection's and item's labels. Never a secret, never an attribute value.
final class AuditLog {
    private let descriptor: Int32
    private let path: String
    /// Whether the last record could not be written: a failure is said once on standard error
    /// (the daemon's log), and so is the first record written again, not every record between.
    private var failing = false

    /// Appends to `path` (created 0600; a symbolic link there is refused).
    init(path: String) throws(SecretServiceError) {
        let descriptor = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard descriptor >= 0 else {
            throw SecretServiceError(
                .failed, "The audit log \(path) could not be opened: \(String(cString: strerror(errno)))")
        }
        self.descriptor = descriptor
        self.path = path
    }

    deinit { close(descriptor) }

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

    /// One write(2) per record on an O_APPEND descriptor: records of concurrent writers do not
    /// interleave. The call a record is about is not refused when the record cannot be written
    /// (a full disk would otherwise stop every client); the daemon's log says so instead.
    private func write(_ line: String) {
        let time = Date.now.formatted(Date.ISO8601FormatStyle(timeZone: .gmt))
        do throws(Errno) {
            try writeAll(descriptor, Array((time + " " + line + "\n").utf8))
            if failing {
                failing = false
                writeStandardError("tpm-keychain-secret-service: the audit log \(path) is written again\n")
            }
        } catch {
            if !failing {
                failing = true
                writeStandardError(
                    "tpm-keychain-secret-service: a record could not be written to the audit log \(path) (\(error)); calls go on unrecorded until it can be\n"
                )
            }
        }
    }
}

import Crypto
import Foundation
import SystemCalls

#if canImport(Glibc)
import Glibc
#endif

/// `tpm-keychain-enrollment`: tells each user an identifier of their own enrolled fingerprints,
/// so that a finger deleted and enrolled again (even someone else's under the same name) changes
/// the enrollment that biometryCurrentSet items are bound to, as on Apple platforms.
///
/// fprintd keeps prints in `/var/lib/fprint/<user>/...`, readable by root only, and tells its
/// callers only the fingers' names. This helper runs as root and answers each connection on its
/// Unix socket with an HMAC-SHA256, under a key of its own that never leaves it, of the connecting
/// user's print files (that user, by the socket's peer credentials: nobody can ask about another
/// user). The key makes the identifier useless anywhere else and reveals nothing of the prints.
///
///     tpm-keychain-enrollment serve              one connection on standard input (systemd
///                                                socket activation with Accept=yes)
///     tpm-keychain-enrollment listen SOCKET      serve connections on SOCKET until killed
///     tpm-keychain-enrollment query [SOCKET]     print this user's identifier (for checks)
///
/// Options (serve, listen): `--prints DIR` (default /var/lib/fprint), `--key FILE` (default
/// /var/lib/tpm-keychain-enrollment/key, made with 32 random bytes at first use, mode 0600).
///
/// It also gives each user a secret of their own that their stores' master keys are sealed with
/// (docs/SECURITY.md, "User binding"): HMAC-SHA256 of the user ID under a key derived from the
/// same root-only key, so a copy of a user's store opens for no other user of the TPM.
///
/// A client sends one request line, `enrollment` or `user-binding`; a client that sends nothing
/// (versions before requests) is answered as for `enrollment`. The answer is one line:
/// `1 <64 hex digits>` or `1 none` (no prints) for `enrollment`, `binding <64 hex digits>` for
/// `user-binding`, or `0 <reason>`.
@main
struct EnrollmentHelper {
    static let defaultSocket = "/run/tpm-keychain-enrollment.sock"

    static func main() {
        // A client that hangs up before its answer makes the write fail (EPIPE), not kill the
        // helper: in `listen` mode one such client would end the service for everyone.
        signal(SIGPIPE, SIG_IGN)
        var arguments = Array(CommandLine.arguments.dropFirst())
        let command = arguments.isEmpty ? "serve" : arguments.removeFirst()
        var prints = "/var/lib/fprint"
        var key = "/var/lib/tpm-keychain-enrollment/key"
        var positional: [String] = []
        while !arguments.isEmpty {
            let argument = arguments.removeFirst()
            switch argument {
            case "--prints" where !arguments.isEmpty: prints = arguments.removeFirst()
            case "--key" where !arguments.isEmpty: key = arguments.removeFirst()
            default: positional.append(argument)
            }
        }
        switch command {
        case "serve":
            answer(on: STDIN_FILENO, prints: prints, keyPath: key)
        case "listen" where positional.count == 1:
            listen(on: positional[0], prints: prints, keyPath: key)
        case "query" where positional.count <= 1:
            exit(query(positional.first ?? defaultSocket))
        default:
            fail("usage: tpm-keychain-enrollment serve | listen SOCKET | query [SOCKET] [--prints DIR] [--key FILE]")
        }
    }

    // MARK: Answering

    /// Answers one connection: the peer's uid, then its print files' keyed hash or its binding.
    static func answer(on connection: Int32, prints: String, keyPath: String) {
        let reply: String
        do {
            let uid = try peerUID(connection)
            switch try request(on: connection) {
            case "", "enrollment": break
            case "user-binding":
                let key = try loadOrMakeKey(keyPath)
                reply = "binding " + userBinding(of: uid, key: key).map { String(format: "%02x", $0) }.joined()
                writeAll(connection, Array((reply + "\n").utf8))
                return
            case let other: throw HelperError("unknown request \(other.prefix(32))")
            }
            guard let entry = getpwuid(uid) else { throw HelperError("uid \(uid) has no user name") }
            let user = String(cString: entry.pointee.pw_name)
            guard !user.isEmpty, !user.contains("/"), user != ".", user != ".." else {
                throw HelperError("user name \(user) cannot name a directory")
            }
            let key = try loadOrMakeKey(keyPath)
            if let identifier = try identifier(of: prints + "/" + user, key: key) {
                reply = "1 " + identifier.map { String(format: "%02x", $0) }.joined()
            } else {
                reply = "1 none"
            }
        } catch {
            reply = "0 \(error)"
        }
        writeAll(connection, Array((reply + "\n").utf8))
    }

    /// The request line, without its newline: empty when the client sends nothing or hangs up
    /// first (clients from before requests only read). Two seconds in all for the line, so a
    /// client that trickles bytes holds a helper no longer than one that sends none.
    static func request(on connection: Int32) throws -> String {
        var line: [UInt8] = []
        var byte: UInt8 = 0
        let deadline = ContinuousClock.now + .seconds(2)
        while line.count <= 64 {
            let left = deadline - ContinuousClock.now
            guard left > .zero else { return line.isEmpty ? "" : String(decoding: line, as: UTF8.self) }
            var ready = pollfd(fd: connection, events: Int16(POLLIN), revents: 0)
            let polled = poll(
                &ready, 1, Int32(left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000))
            if polled < 0, errno == EINTR { continue }
            guard polled > 0 else { continue }
            let count = read(connection, &byte, 1)
            if count < 0, errno == EINTR { continue }
            guard count == 1 else { return String(decoding: line, as: UTF8.self) }
            if byte == UInt8(ascii: "\n") { return String(decoding: line, as: UTF8.self) }
            line.append(byte)
        }
        throw HelperError("the request is too long")
    }

    /// The user's binding secret: HMAC-SHA256 of the user ID (4 bytes, big-endian) under a key
    /// derived from the helper's key for this use alone, so it says nothing of the print hashes.
    static func userBinding(of uid: uid_t, key: SymmetricKey) -> [UInt8] {
        let bindingKey = HKDF<SHA256>.deriveKey(
            inputKeyMaterial: key, info: Array("tpm-keychain user binding v1".utf8), outputByteCount: 32)
        let user = (0..<4).map { UInt8(truncatingIfNeeded: uid >> (24 - 8 * $0)) }
        return Array(HMAC<SHA256>.authenticationCode(for: user, using: bindingKey))
    }

    /// HMAC-SHA256 under `key` of every regular file under `directory` (sorted by relative path:
    /// the path, a NUL, the size as 8 bytes big-endian, the contents); nil when there is none.
    static func identifier(of directory: String, key: SymmetricKey) throws -> [UInt8]? {
        var files: [(path: String, contents: [UInt8])] = []
        try collect(directory, relative: "", into: &files, depth: 0)
        guard !files.isEmpty else { return nil }
        var mac = HMAC<SHA256>(key: key)
        mac.update(data: Array("tpm-keychain enrollment v1".utf8) + [0])
        for file in files.sorted(by: { $0.path < $1.path }) {
            mac.update(data: Array(file.path.utf8) + [0])
            let size = UInt64(file.contents.count)
            mac.update(data: (0..<8).map { UInt8(truncatingIfNeeded: size >> (56 - 8 * $0)) })
            mac.update(data: file.contents)
        }
        return Array(mac.finalize())
    }

    /// fprintd's layout is `<user>/<driver>/<device>/<finger>`: a few levels, a few small files.
    private static func collect(
        _ directory: String, relative: String, into files: inout [(path: String, contents: [UInt8])], depth: Int
    ) throws {
        guard depth < 8 else { throw HelperError("\(directory) nests too deep to be fprintd's") }
        var status = stat()
        guard lstat(directory, &status) == 0 else {
            if errno == ENOENT { return }
            throw HelperError("\(directory): \(String(cString: strerror(errno)))")
        }
        guard status.st_mode & S_IFMT == S_IFDIR else { throw HelperError("\(directory) is not a directory") }
        let names = try FileManager.default.contentsOfDirectory(atPath: directory).sorted()
        for name in names {
            let path = directory + "/" + name
            let relativePath = relative.isEmpty ? name : relative + "/" + name
            guard lstat(path, &status) == 0 else { continue }
            switch status.st_mode & S_IFMT {
            case S_IFDIR: try collect(path, relative: relativePath, into: &files, depth: depth + 1)
            case S_IFREG:
                guard status.st_size <= 1 << 20 else { throw HelperError("\(path) is too large to be a print") }
                files.append((relativePath, try readFile(path)))
            default: throw HelperError("\(path) is neither a file nor a directory")
            }
        }
    }

    // MARK: The key

    /// The helper's HMAC key: read from `path`, or made (32 random bytes, mode 0600 in a 0700
    /// directory) when there is none yet. Never sent anywhere.
    static func loadOrMakeKey(_ path: String) throws -> SymmetricKey {
        if let existing = try? readFile(path) {
            guard existing.count == 32 else { throw HelperError("\(path) does not hold a 32-byte key") }
            return SymmetricKey(data: existing)
        }
        let directory = (path as NSString).deletingLastPathComponent
        if mkdir(directory, 0o700) != 0, errno != EEXIST {
            throw HelperError("\(directory): \(String(cString: strerror(errno)))")
        }
        let key = SymmetricKey(size: .bits256)
        let bytes = key.withUnsafeBytes { Array($0) }
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            // Another connection made it first: use that one.
            if errno == EEXIST { return try loadOrMakeKey(path) }
            throw HelperError("\(path): \(String(cString: strerror(errno)))")
        }
        writeAll(descriptor, bytes)
        fsync(descriptor)
        close(descriptor)
        return key
    }

    // MARK: Sockets

    static func peerUID(_ connection: Int32) throws -> uid_t {
        guard let peer = peerCredentials(of: connection) else {
            throw HelperError("not a Unix socket with peer credentials: \(String(cString: strerror(errno)))")
        }
        return peer.uid
    }

    static func listen(on path: String, prints: String, keyPath: String) {
        unlink(path)
        let server = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard server >= 0, bind(server, path) == 0, chmod(path, 0o666) == 0, Glibc.listen(server, 16) == 0 else {
            fail("cannot listen on \(path): \(String(cString: strerror(errno)))")
        }
        while true {
            let connection = accept(server, nil, nil)
            if connection < 0 {
                if errno == EINTR { continue }
                fail("accept: \(String(cString: strerror(errno)))")
            }
            answer(on: connection, prints: prints, keyPath: keyPath)
            close(connection)
        }
    }

    static func query(_ path: String) -> Int32 {
        let connection = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard connection >= 0, connect(connection, path) == 0 else {
            print("0 cannot connect to \(path): \(String(cString: strerror(errno)))")
            return 69
        }
        defer { close(connection) }
        writeAll(connection, Array("enrollment\n".utf8))
        var reply: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 256)
        while reply.count < 4096 {
            let count = read(connection, &buffer, buffer.count)
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { break }
            reply += buffer[0..<count]
        }
        let text = String(decoding: reply, as: UTF8.self)
        print(text, terminator: "")
        return text.hasPrefix("1 ") ? 0 : 65
    }

    private static func bind(_ descriptor: Int32, _ path: String) -> Int32 {
        withUnixSocketAddress(path) { Glibc.bind(descriptor, $0, $1) }
    }

    private static func connect(_ descriptor: Int32, _ path: String) -> Int32 {
        withUnixSocketAddress(path) { Glibc.connect(descriptor, $0, $1) }
    }

    // MARK: Files

    static func readFile(_ path: String) throws -> [UInt8] {
        let descriptor = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard descriptor >= 0 else { throw HelperError("\(path): \(String(cString: strerror(errno)))") }
        defer { close(descriptor) }
        var contents: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = read(descriptor, &buffer, buffer.count)
            if count < 0, errno == EINTR { continue }
            guard count >= 0 else { throw HelperError("\(path): \(String(cString: strerror(errno)))") }
            if count == 0 { return contents }
            contents += buffer[0..<count]
            guard contents.count <= 1 << 20 else { throw HelperError("\(path) is too large") }
        }
    }

    static func writeAll(_ descriptor: Int32, _ bytes: [UInt8]) {
        var written = 0
        while written < bytes.count {
            let count = bytes[written...].withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { return }
            written += count
        }
    }

    static func fail(_ message: String) -> Never {
        FileHandle.standardError.write(Data(("tpm-keychain-enrollment: " + message + "\n").utf8))
        exit(64)
    }
}

struct HelperError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

import Foundation
import SystemCalls
import TPMKeychain

#if canImport(Glibc)
import Glibc
#endif

/// Asks the enrollment helper (`tpm-keychain-enrollment`, run by root) for an identifier of the
/// calling user's print files: what fprintd cannot tell a non-root caller.
struct EnrollmentHelperClient {
    /// What the helper said.
    enum Answer: Equatable {
        /// No helper is installed (its socket is not there): the finger names are all there is.
        case notInstalled
        /// The helper's keyed hash of this user's prints.
        case prints([UInt8])
        /// The helper finds no print of this user.
        case noPrints
    }

    static let defaultSocket = "/run/tpm-keychain-enrollment.sock"
    static let socketVariable = "TPM_KEYCHAIN_ENROLLMENT_HELPER"

    let socketPath: String

    /// - Throws: ``AuthenticationError`` `.biometryNotAvailable` when a helper is installed but
    ///   does not answer, or its socket is not root's: falling back to the finger names would
    ///   look like an enrollment change and invalidate every biometryCurrentSet item.
    func ask() throws(AuthenticationError) -> Answer {
        var status = stat()
        guard lstat(socketPath, &status) == 0 else {
            if errno == ENOENT { return .notInstalled }
            throw unavailable("cannot check \(socketPath): \(Errno.current)")
        }
        guard status.st_mode & S_IFMT == S_IFSOCK, status.st_uid == 0 else {
            throw unavailable("\(socketPath) is not a socket of root's, so it is not the enrollment helper")
        }
        let connection = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard connection >= 0 else { throw unavailable("socket: \(Errno.current)") }
        defer { close(connection) }
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        _ = setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        guard Self.connect(connection, socketPath) == 0 else {
            throw unavailable("the enrollment helper at \(socketPath) does not answer: \(Errno.current)")
        }
        // struct ucred (pid, uid, gid), which Glibc's module does not export without _GNU_SOURCE.
        var credentials: [Int32] = [0, 0, 0]
        var length = socklen_t(MemoryLayout<Int32>.size * 3)
        guard getsockopt(connection, SOL_SOCKET, SO_PEERCRED, &credentials, &length) == 0, credentials[1] == 0 else {
            throw unavailable("the process behind \(socketPath) is not root's, so it is not the enrollment helper")
        }
        var reply: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 256)
        while reply.count < 4096 {
            let count = read(connection, &buffer, buffer.count)
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { break }
            reply += buffer[0..<count]
        }
        let line = String(decoding: reply, as: UTF8.self).trimmingCharacters(in: .newlines)
        if line == "1 none" { return .noPrints }
        if line.hasPrefix("1 "), let bytes = Self.bytes(hex: String(line.dropFirst(2))), bytes.count == 32 {
            return .prints(bytes)
        }
        throw unavailable("the enrollment helper refused: \(line.isEmpty ? "no answer" : line)")
    }

    private func unavailable(_ message: String) -> AuthenticationError {
        AuthenticationError(.biometryNotAvailable, message)
    }

    private static func bytes(hex: String) -> [UInt8]? {
        let digits = Array(hex.utf8)
        guard digits.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        for index in stride(from: 0, to: digits.count, by: 2) {
            guard let byte = UInt8(String(decoding: digits[index..<index + 2], as: UTF8.self), radix: 16) else {
                return nil
            }
            bytes.append(byte)
        }
        return bytes
    }

    private static func connect(_ descriptor: Int32, _ path: String) -> Int32 {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            errno = ENAMETOOLONG
            return -1
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
    }
}

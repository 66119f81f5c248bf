#if canImport(Glibc)
import Glibc
#endif

/// A question to a helper that runs as root behind a Unix socket (`tpm-keychain-enrollment`):
/// one request line out, one answer line back. The socket and the process behind it must both be
/// root's; a socket anyone could have made is never asked, since its answer would be trusted.
public struct RootHelperSocket: Sendable {
    /// Why there is no answer.
    public enum Failure: Error, Equatable, Sendable {
        /// Nothing is at the path: the helper is not installed.
        case notInstalled
        /// Something is there but it is not the helper, or it does not answer.
        case unavailable(String)
    }

    public let path: String

    public init(path: String) {
        self.path = path
    }

    /// Sends `request` (a line, without its newline; nil sends nothing, as clients before
    /// requests did) and returns the answer's first line.
    ///
    /// - Parameter timeoutSeconds: how long a read may wait: a helper that hangs costs its
    ///   caller this much at most.
    public func ask(_ request: String?, timeoutSeconds: Int = 10) throws(Failure) -> String {
        let connection: Int32
        do throws(OwnedSocketFailure) {
            connection = try connectToOwnedSocket(path, owner: 0, timeoutSeconds: timeoutSeconds)
        } catch {
            switch error {
            case .absent: throw .notInstalled
            case .unchecked(let reason): throw .unavailable("cannot check \(path): \(reason)")
            case .foreignSocket: throw .unavailable("\(path) is not a socket of root's, so it is not the helper")
            case .refused(let reason): throw .unavailable("the helper at \(path) does not answer: \(reason)")
            case .foreignPeer: throw .unavailable("the process behind \(path) is not root's, so it is not the helper")
            }
        }
        defer { close(connection) }
        if let request {
            let bytes = Array((request + "\n").utf8)
            var written = 0
            while written < bytes.count {
                let count = bytes[written...].withUnsafeBytes {
                    // MSG_NOSIGNAL: a helper that hangs up first must not kill this process (SIGPIPE).
                    send(connection, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
                }
                if count < 0, errno == EINTR { continue }
                // A helper from before requests answers at once and hangs up: its answer may be
                // waiting to be read even though the request could not be sent.
                guard count > 0 else { break }
                written += count
            }
        }
        var reply: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 256)
        while reply.count < 4096, !reply.contains(UInt8(ascii: "\n")) {
            let count = read(connection, &buffer, buffer.count)
            if count < 0, errno == EINTR { continue }
            if count < 0 { throw .unavailable("the helper at \(path) did not answer: \(Errno.current)") }
            guard count > 0 else { break }
            reply += buffer[0..<count]
        }
        let line = reply.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).first ?? []
        return String(decoding: line, as: UTF8.self)
    }
}

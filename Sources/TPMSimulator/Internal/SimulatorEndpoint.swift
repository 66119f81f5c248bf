// Where one swtpm listens: two loopback TCP ports (command P, control P+1, as the tss2 swtpm TCTI
// derives them), or two Unix sockets in a private directory (`tpm.sock` and `tpm.sock.ctrl`, the
// control path the TCTI derives from `path=`).

import SystemCalls

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

enum SimulatorEndpoint: Sendable, Hashable {
    case tcp(port: Int)
    /// `directory` is private (0700, made by mkdtemp), so no other user can connect, and holds
    /// nothing else: it is deleted with the simulator.
    case unixSocket(directory: String)

    var commandSocketPath: String? {
        guard case .unixSocket(let directory) = self else { return nil }
        return directory + "/tpm.sock"
    }

    /// The tpm2-tss TCTI configuration string.
    var tcti: String {
        switch self {
        case .tcp(let port): "swtpm:host=127.0.0.1,port=\(port)"
        case .unixSocket: "swtpm:path=\(commandSocketPath ?? "")"
        }
    }

    /// swtpm's `--server` and `--ctrl` options.
    var serverArguments: [String] {
        switch self {
        case .tcp(let port):
            [
                "--server", "type=tcp,port=\(port),bindaddr=127.0.0.1", "--ctrl",
                "type=tcp,port=\(port + 1),bindaddr=127.0.0.1",
            ]
        case .unixSocket:
            [
                "--server", "type=unixio,path=\(commandSocketPath ?? "")", "--ctrl",
                "type=unixio,path=\(commandSocketPath ?? "").ctrl",
            ]
        }
    }

    /// For messages.
    var description: String {
        switch self {
        case .tcp(let port): "port \(port)"
        case .unixSocket: "socket \(commandSocketPath ?? "")"
        }
    }

    /// A connected, blocking socket to the command channel or the control channel, with send and
    /// receive timeouts.
    ///
    /// - Throws: `Errno` (ECONNREFUSED or ENOENT while nothing listens yet).
    func connect(control: Bool, timeout: Duration) throws(Errno) -> Int32 {
        switch self {
        case .tcp(let port):
            return try LoopbackSocket.connectTCP(host: "127.0.0.1", port: control ? port + 1 : port, timeout: timeout)
        case .unixSocket:
            let path = (commandSocketPath ?? "") + (control ? ".ctrl" : "")
            return try LoopbackSocket.connectUnix(path: path, timeout: timeout)
        }
    }

    /// A new private directory for the sockets, under `$XDG_RUNTIME_DIR`, else `$TMPDIR`, else
    /// /tmp: mkdtemp picks an unpredictable name and creates it 0700, so it cannot be squatted
    /// or entered by other users, and the path stays well under the 108 bytes a socket path may have.
    static func makeSocketDirectory() throws(Errno) -> String {
        var base = "/tmp"
        for variable in ["XDG_RUNTIME_DIR", "TMPDIR"] {
            if let value = getenv(variable).map({ String(cString: $0) }), value.hasPrefix("/"), value.utf8.count < 60,
                access(value, W_OK | X_OK) == 0
            {
                base = value
                break
            }
        }
        var template = Array((base + "/tpm-keychain-swtpm.XXXXXX").utf8CString)
        let created = template.withUnsafeMutableBufferPointer { $0.baseAddress.flatMap(mkdtemp) }
        guard created != nil else { throw Errno.current }
        return String(decoding: template.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

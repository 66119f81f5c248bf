import ToolSupport

#if canImport(Glibc)
import Glibc
#endif

/// The sockets the user's own servers listen on (the ssh agent, the session holder), in the
/// user's runtime directory: `$XDG_RUNTIME_DIR/tpm-keychain/NAME`.
package enum RuntimeSockets {
    /// `$XDG_RUNTIME_DIR/tpm-keychain`, made 0700 when missing.
    ///
    /// - Parameter option: the option that names a socket instead, for the message when
    ///   XDG_RUNTIME_DIR is not set.
    /// - Throws: ``CommandFailure`` when XDG_RUNTIME_DIR is not set or the directory cannot be made.
    package static func directory(option: String) throws -> String {
        guard let runtime = getenv("XDG_RUNTIME_DIR").map({ String(cString: $0) }), runtime.hasPrefix("/") else {
            throw CommandFailure(ExitStatus.usage, "XDG_RUNTIME_DIR is not set: give the socket's path with \(option)")
        }
        let directory = runtime + "/tpm-keychain"
        try makePrivate(directory)
        return directory
    }

    /// Makes `directory` 0700 when it is missing.
    ///
    /// - Throws: ``CommandFailure`` when it cannot be made.
    package static func makePrivate(_ directory: String) throws {
        if mkdir(directory, 0o700) != 0, errno != EEXIST {
            throw CommandFailure(ExitStatus.ioError, "Cannot create \(directory): \(String(cString: strerror(errno)))")
        }
    }
}

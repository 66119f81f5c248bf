import SystemCalls

/// Why a ``SoftwareTPM`` could not be started or could not carry out a request.
///
/// The ``code`` is stable and meant for `switch`; the ``message`` is for people and says what to
/// do about it (for a launch failure it carries the end of swtpm's own error output).
public struct SoftwareTPMError: Error, CustomStringConvertible, Sendable, Equatable {
    /// The failures a caller may want to tell apart.
    public enum Code: Sendable, Equatable, Hashable {
        /// The swtpm binary is not installed or not on `PATH` (Debian/Ubuntu package "swtpm").
        case executableNotFound
        /// The state directory could not be created, or is not a directory.
        case stateDirectoryUnusable
        /// swtpm could not be spawned or exited during startup.
        case launchFailed
        /// swtpm kept running but did not answer a TPM command within the startup timeout.
        case startupTimedOut
        /// Talking to the TPM command port failed (connection refused, timeout, malformed reply).
        case commandChannelFailed
        /// Talking to swtpm's control port failed, or swtpm reported a non-zero result there.
        case controlChannelFailed
        /// The TPM answered a command with a non-zero TPM_RC.
        case commandFailed(responseCode: UInt32)
        /// The simulator was stopped (or died) before the request.
        case notRunning
    }

    /// The stable failure kind.
    public let code: Code
    /// What happened and what to do about it.
    public let message: String
    /// The POSIX errno behind the failure, when a system call failed.
    public let systemErrno: Int32?

    /// Creates an error; public so test doubles can produce the same errors the simulator does.
    public init(_ code: Code, _ message: String, systemErrno: Int32? = nil) {
        self.code = code
        self.message = message
        self.systemErrno = systemErrno
    }

    /// The message, with the underlying system error when there is one.
    public var description: String {
        "SoftwareTPMError.\(code): \(message)"
    }
}

extension SoftwareTPMError {
    init(_ code: Code, _ message: String, cause: Errno) {
        self.init(code, "\(message): \(cause)", systemErrno: cause.rawValue)
    }
}

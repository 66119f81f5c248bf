import SystemCalls
import TPM

/// Why a ``RecordingTPMProxy`` could not start.
public struct RecordingTPMProxyError: Error, CustomStringConvertible, Sendable, Equatable {
    /// The failures a caller may want to tell apart.
    public enum Code: Sendable, Equatable, Hashable {
        /// No pair of consecutive loopback ports could be bound.
        case listenFailed
        /// The operating system refused another thread.
        case threadCreationFailed
    }

    /// The stable failure kind.
    public let code: Code
    /// What happened.
    public let message: String
    /// The POSIX error number behind the failure.
    public let systemErrno: Int32?

    /// Creates an error.
    public init(_ code: Code, _ message: String, systemErrno: Int32? = nil) {
        self.code = code
        self.message = message
        self.systemErrno = systemErrno
    }

    /// The code and the message.
    public var description: String { "RecordingTPMProxyError.\(code): \(message)" }
}

/// A loopback TCP proxy in front of a swtpm that records the TPM command channel.
///
/// Tests use it to prove properties of the bytes on the TPM bus: that a secret never crosses it
/// in clear (search ``recordedBytes()``), or how many round trips an operation costs
/// (``commandCount``, ``commandCodes``). It listens on two consecutive ports Q and Q+1 and
/// forwards them to the simulator's command port and control port, because the tss2 swtpm TCTI
/// uses both (it sends CMD_SET_LOCALITY on the control port when a context is created).
///
/// ```swift
/// let tpm = try SoftwareTPM.start()
/// let proxy = try RecordingTPMProxy.start(forwardingTo: tpm.port)
/// // ... create a TSS context with proxy.tcti and use it ...
/// #expect(!proxy.recordedBytes().contains(secret))
/// ```
///
/// - Important: only the command channel (port Q) is recorded; the control channel is forwarded
///   untouched.
public final class RecordingTPMProxy: Sendable {
    /// The proxy's command port on 127.0.0.1; its control port is `port + 1`.
    public let port: Int
    /// The TCTI configuration string that routes a TSS through the proxy.
    public var tcti: String { "swtpm:host=127.0.0.1,port=\(port)" }

    private let forwarder: ProxyForwarder

    private init(forwarder: ProxyForwarder) {
        self.forwarder = forwarder
        self.port = forwarder.listenPort
    }

    deinit {
        stop()
    }

    /// Starts forwarding 127.0.0.1:Q to `host:port` and Q+1 to `host:port+1`.
    ///
    /// - Parameters:
    ///   - port: the TPM command port, e.g. `SoftwareTPM.port`.
    ///   - host: where the TPM listens (IPv4 literal).
    ///   - latency: holds each command back by its cost in this profile before forwarding it, so
    ///     that swtpm answers at the pace of real hardware; nil forwards at once.
    /// - Throws: ``RecordingTPMProxyError`` if the ports cannot be bound or threads not started.
    public static func start(
        forwardingTo port: Int, host: String = "127.0.0.1", latency: TPMLatencyProfile? = nil
    ) throws(RecordingTPMProxyError) -> RecordingTPMProxy {
        RecordingTPMProxy(forwarder: try ProxyForwarder.start(upstreamHost: host, upstreamPort: port, latency: latency))
    }

    /// How many TPM commands clients sent on the command channel since start or ``reset()``.
    public var commandCount: Int { forwarder.snapshot().commandCodes.count }

    /// The command codes (TPM_CC) of those commands, in the order they were sent.
    public var commandCodes: [UInt32] { forwarder.snapshot().commandCodes }

    /// Every byte that crossed the command channel in either direction, in the order it was read.
    public func recordedBytes() -> [UInt8] { forwarder.snapshot().bytes }

    /// Flushes every transient object and loaded session the TPM holds, as a resource manager
    /// does when a client closes its connection; not recorded. Tests that count the commands of
    /// a client behind a resource manager (which flushes nothing at close) call it as each of the
    /// client's connections closes.
    public func flushLeftovers() { forwarder.flushLeftovers() }

    /// Forgets everything recorded so far, e.g. after a test's setup phase.
    public func reset() { forwarder.reset() }

    /// Stops listening, disconnects clients and waits for all forwarding threads, then removes
    /// the proxy's TPM access lock file unless someone holds it (as a stopped simulator does).
    /// Idempotent; also runs from deinit.
    public func stop() {
        forwarder.stop()
        TPMConfiguration.removeUnusedAccessLock(tcti: tcti)
    }
}

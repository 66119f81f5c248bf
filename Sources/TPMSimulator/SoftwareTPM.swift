import FoundationEssentials
import SystemCalls
import TPM

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A software TPM 2.0 (swtpm) running as a child process, for tests and for trying TPMKeychain on
/// machines without a TPM. It listens on two loopback TCP ports, or with
/// ``Configuration/listensOnUnixSocket`` on Unix sockets in a private 0700 directory, which other
/// local users cannot reach (a TCP port on loopback is open to every user of the machine).
///
/// Point a TSS at it with ``tcti`` (`swtpm:host=127.0.0.1,port=…` or `swtpm:path=…`). The simulator is a child of
/// this process and never outlives it: ``stop()`` ends it in order, an `atexit` handler stops
/// every instance on normal exit, and a watchdog process kills swtpm if this process dies
/// abruptly (crash, SIGKILL).
///
/// - Important: swtpm serves one command connection at a time. While a TSS context is connected,
///   ``powerCycle()``, ``resetDictionaryAttackLockout()`` and
///   ``setDictionaryAttackParameters(maxTries:recoveryTime:lockoutRecovery:)`` wait for it and
///   fail with ``SoftwareTPMError/Code/commandChannelFailed`` after a timeout. Close contexts first.
/// - Important: a simulated TPM offers no security: its secrets live in ordinary files.
public final class SoftwareTPM: Sendable {
    /// How to start the simulator.
    public struct Configuration: Sendable {
        /// Where swtpm keeps its NVRAM (`tpm2-00.permall`). `nil`: a private directory (mode 0700)
        /// that ``SoftwareTPM/stop()`` deletes, i.e. a brand-new TPM every time. A path: a
        /// persistent simulated TPM, created with mode 0700 if missing and never deleted, so keys
        /// and NV indices survive restarts.
        public var stateDirectory: String?
        /// The swtpm binary: a name looked up in `PATH`, or a path.
        public var executable: String
        /// How long swtpm may take to answer its first command.
        public var startupTimeout: Duration
        /// Listen on Unix sockets in a private directory instead of loopback TCP ports: no other
        /// user can send the TPM commands, and no TCP connection per command piles up in
        /// TIME_WAIT. ``SoftwareTPM/port`` is then 0, and tools that need a port (the recording
        /// proxy) cannot be used.
        public var listensOnUnixSocket: Bool
        /// Each stop saves the TPM's state (TPM2_Shutdown(SU_STATE)) and the next start resumes
        /// it (TPM2_Startup(SU_STATE)), as a machine that sleeps between uses rather than
        /// reboots: NV indices that a reset clears (a keychain's lock state) keep what was
        /// written. A start after a stop that was not orderly (the simulator killed), or on a new
        /// state, is a boot (SU_CLEAR). For a persistent ``stateDirectory``.
        public var resumesAcrossRuns: Bool

        /// How to start swtpm: where its state lives, which binary, how long to wait for it.
        ///
        /// - Parameters:
        ///   - stateDirectory: `nil` for a throwaway TPM, a path for a persistent one.
        ///   - executable: the swtpm binary; Debian/Ubuntu ship it in the package "swtpm".
        ///   - startupTimeout: generous by default because loaded CI machines start slowly.
        ///   - listensOnUnixSocket: Unix sockets in a private directory instead of TCP ports.
        ///   - resumesAcrossRuns: save the TPM's state at each stop and resume it at the next start.
        public init(
            stateDirectory: String? = nil, executable: String = "swtpm", startupTimeout: Duration = .seconds(10),
            listensOnUnixSocket: Bool = false, resumesAcrossRuns: Bool = false
        ) {
            self.stateDirectory = stateDirectory
            self.executable = executable
            self.startupTimeout = startupTimeout
            self.listensOnUnixSocket = listensOnUnixSocket
            self.resumesAcrossRuns = resumesAcrossRuns
        }
    }

    /// The TPM command port on 127.0.0.1; 0 when the simulator listens on a Unix socket.
    public var port: Int { process.port }
    /// swtpm's control port. Always ``port`` + 1, because the tss2 swtpm TCTI derives it that way.
    public var controlPort: Int { port + 1 }
    /// The command socket's path when the simulator listens on Unix sockets; nil on TCP.
    public var socketPath: String? { process.endpoint.commandSocketPath }
    /// The swtpm process.
    public var processID: Int32 { process.pid }
    /// The directory holding swtpm's state, its pid file and its stderr log.
    public let stateDirectory: String
    /// The TCTI configuration string for tpm2-tss (`Tss2_TctiLdr_Initialize`, `TPM2TOOLS_TCTI`, `-T`).
    public var tcti: String { process.endpoint.tcti }

    private let process: SimulatorProcess
    var endpoint: SimulatorEndpoint { process.endpoint }

    private let ownsStateDirectory: Bool
    private let state: Locked<Lifecycle>
    /// How long a request may wait for swtpm's single command connection.
    let commandTimeout: Duration = .seconds(10)

    private struct Lifecycle: Sendable {
        var watchdog: Watchdog?
        var stopped = false
        var reaped = false
    }

    private init(process: SimulatorProcess, stateDirectory: String, ownsStateDirectory: Bool) {
        self.process = process
        self.stateDirectory = stateDirectory
        self.ownsStateDirectory = ownsStateDirectory
        self.state = Locked(Lifecycle(watchdog: process.watchdog))
    }

    deinit {
        stop()
    }

    /// Starts swtpm and returns once it has answered a TPM command.
    ///
    /// - Parameter configuration: binary, state directory and startup timeout.
    /// - Returns: a running simulator; call ``stop()`` when done (deinit also stops it).
    /// - Throws: ``SoftwareTPMError`` with code ``SoftwareTPMError/Code/executableNotFound`` when
    ///   swtpm is not installed, ``SoftwareTPMError/Code/stateDirectoryUnusable``,
    ///   ``SoftwareTPMError/Code/launchFailed`` (message includes swtpm's stderr) or
    ///   ``SoftwareTPMError/Code/startupTimedOut``.
    public static func start(_ configuration: Configuration = .init()) throws(SoftwareTPMError) -> SoftwareTPM {
        // Lock files that simulators of earlier versions left in the TPM lock directory: swept by
        // the first throwaway simulator of a process, a test's, not by a store's own persistent
        // one, which starts with every CLI command that needs it.
        if configuration.stateDirectory == nil { TPMConfiguration.removeStaleAccessLocksOnce() }
        guard let executablePath = ChildProcess.resolveExecutable(configuration.executable) else {
            let path = getenv("PATH").map { String(cString: $0) } ?? "(unset)"
            throw SoftwareTPMError(
                .executableNotFound,
                "swtpm executable '\(configuration.executable)' not found (PATH=\(path)). Install the package \"swtpm\" (apt-get install swtpm) or set SoftwareTPM.Configuration.executable."
            )
        }
        let directory: String
        let owned: Bool
        if let requested = configuration.stateDirectory {
            directory = try prepareStateDirectory(requested)
            owned = false
        } else {
            directory = try makePrivateDirectory()
            owned = true
        }
        var socketDirectory: String?
        do throws(SoftwareTPMError) {
            if configuration.listensOnUnixSocket {
                do {
                    socketDirectory = try SimulatorEndpoint.makeSocketDirectory()
                } catch {
                    throw SoftwareTPMError(
                        .stateDirectoryUnusable, "cannot create a private directory for swtpm's sockets", cause: error)
                }
            }
            let process = try SimulatorProcess.launch(
                executablePath: executablePath, stateDirectory: directory, ownsStateDirectory: owned,
                socketDirectory: socketDirectory, timeout: configuration.startupTimeout,
                resumes: configuration.resumesAcrossRuns)
            let instance = SoftwareTPM(process: process, stateDirectory: directory, ownsStateDirectory: owned)
            InstanceRegistry.register(instance)
            return instance
        } catch {
            if owned { try? FileManager.default.removeItem(atPath: directory) }
            if let socketDirectory { try? FileManager.default.removeItem(atPath: socketDirectory) }
            throw error
        }
    }

    /// Whether swtpm is still running (false after ``stop()`` or if it died).
    public var isRunning: Bool {
        state.withLock { lifecycle in
            guard !lifecycle.stopped, !lifecycle.reaped else { return false }
            if ChildProcess.reapIfExited(processID) { lifecycle.reaped = true }
            return !lifecycle.reaped
        }
    }

    /// Simulates a reboot: an orderly TPM2_Shutdown(SU_CLEAR), a power cycle (_TPM_Init through
    /// swtpm's control channel), then TPM2_Startup(SU_CLEAR). Transient objects, sessions and
    /// PCRs are reset; persistent objects, NV indices and hierarchy passwords survive. Because
    /// the shutdown is orderly, no dictionary-attack failure is counted.
    ///
    /// - Throws: ``SoftwareTPMError`` with ``SoftwareTPMError/Code/commandFailed(responseCode:)``
    ///   if the TPM refuses a step, ``SoftwareTPMError/Code/controlChannelFailed``,
    ///   ``SoftwareTPMError/Code/commandChannelFailed`` (also when a TSS context holds the
    ///   command connection), or ``SoftwareTPMError/Code/notRunning``.
    public func powerCycle() throws(SoftwareTPMError) {
        try requireRunning()
        try TPMTransport.execute(
            StartupCommands.shutdownClear(), name: "TPM2_Shutdown(SU_CLEAR)", endpoint: endpoint,
            timeout: commandTimeout)
        // Init flags 0: keep no volatile state file; a real reboot loses volatile state too.
        try TPMTransport.control(.initialize, payload: [0, 0, 0, 0], endpoint: endpoint, timeout: commandTimeout)
        try TPMTransport.execute(
            StartupCommands.startupClear(), name: "TPM2_Startup(SU_CLEAR)", endpoint: endpoint, timeout: commandTimeout)
    }

    /// Clears the dictionary-attack failure counter and lockout (TPM2_DictionaryAttackLockReset),
    /// so a test that provoked a lockout can continue. Uses the empty lockout password of a fresh
    /// TPM.
    ///
    /// - Throws: ``SoftwareTPMError`` with ``SoftwareTPMError/Code/commandFailed(responseCode:)``
    ///   (e.g. when a lockout password was set, or the lockout hierarchy itself is locked out),
    ///   a channel failure, or ``SoftwareTPMError/Code/notRunning``.
    public func resetDictionaryAttackLockout() throws(SoftwareTPMError) {
        try requireRunning()
        try TPMTransport.execute(
            DictionaryAttackCommands.lockReset(), name: "TPM2_DictionaryAttackLockReset", endpoint: endpoint,
            timeout: commandTimeout)
    }

    /// Sets the dictionary-attack policy (TPM2_DictionaryAttackParameters), e.g. a low
    /// `maxTries` to test lockout handling quickly.
    ///
    /// - Parameters:
    ///   - maxTries: authorization failures before lockout (TPM2_PT_MAX_AUTH_FAIL).
    ///   - recoveryTime: seconds after which one failure is forgotten; 0 disables DA protection.
    ///   - lockoutRecovery: seconds before the lockout password may be retried after a failure.
    /// - Throws: as ``resetDictionaryAttackLockout()``.
    public func setDictionaryAttackParameters(
        maxTries: UInt32, recoveryTime: UInt32, lockoutRecovery: UInt32
    ) throws(SoftwareTPMError) {
        try requireRunning()
        try TPMTransport.execute(
            DictionaryAttackCommands.parameters(
                maxTries: maxTries, recoveryTime: recoveryTime, lockoutRecovery: lockoutRecovery),
            name: "TPM2_DictionaryAttackParameters", endpoint: endpoint, timeout: commandTimeout)
    }

    /// Stops swtpm: disarms the watchdog, shuts the TPM down in order (falling back to SIGTERM and
    /// SIGKILL), reaps it and deletes the private state directory. Safe to call repeatedly and
    /// from any thread; also runs from deinit and at normal process exit.
    public func stop() {
        let watchdog: Watchdog? = state.withLock { lifecycle in
            guard !lifecycle.stopped else { return nil }
            lifecycle.stopped = true
            defer { lifecycle.watchdog = nil }
            return lifecycle.watchdog
        }
        guard let watchdog else { return }
        // Watchdog first: once swtpm is reaped its PID may be reused, and a watchdog still armed
        // could then SIGKILL an unrelated process.
        watchdog.disarm()
        SimulatorProcess.terminate(pid: processID, endpoint: endpoint, orderly: true, resumes: process.resumes)
        state.withLock { $0.reaped = true }
        if ownsStateDirectory {
            try? FileManager.default.removeItem(atPath: stateDirectory)
        }
        if case .unixSocket(let directory) = endpoint {
            try? FileManager.default.removeItem(atPath: directory)
        }
        // Its TPM access lock file: no TPM answers at this TCTI any more, and the next simulator
        // on the same port makes a new one (TPMAccessLock checks the file it locked is still there).
        TPMConfiguration.removeUnusedAccessLock(tcti: tcti)
        InstanceRegistry.unregister(ObjectIdentifier(self))
    }

    private func requireRunning() throws(SoftwareTPMError) {
        guard isRunning else {
            throw SoftwareTPMError(
                .notRunning, "the simulator (pid \(processID), \(endpoint.description)) is not running; start a new one"
            )
        }
    }

    // MARK: - Testing hooks

    /// Closes the watchdog pipe as if this process had died, without disarming anything else.
    func simulateParentDeathForTesting() {
        state.withLock { lifecycle in
            guard let watchdog = lifecycle.watchdog else { return }
            closeDescriptor(watchdog.writeEnd)
            // Replace with a copy whose pipe is already closed, so stop() reaps the shell but
            // does not close a descriptor number that may since have been reused.
            lifecycle.watchdog = Watchdog(pid: watchdog.pid, writeEnd: -1)
        }
    }

    /// Waits until swtpm has exited and reaps it; true if that happened within `timeout`.
    func waitForSimulatorExitForTesting(timeout: Duration) -> Bool {
        let exited = ChildProcess.waitForExit(processID, timeout: timeout)
        if exited { state.withLock { $0.reaped = true } }
        return exited
    }

    // MARK: - State directories

    private static func makePrivateDirectory() throws(SoftwareTPMError) -> String {
        let base = getenv("TMPDIR").map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        var template = Array((base + "/tpm-simulator.XXXXXX").utf8CString)
        let created = template.withUnsafeMutableBufferPointer { $0.baseAddress.flatMap(mkdtemp) }
        guard created != nil else {
            throw SoftwareTPMError(
                .stateDirectoryUnusable, "cannot create a private state directory in \(base)", cause: .current)
        }
        // mkdtemp already uses mode 0700: swtpm's state is the TPM's secrets.
        return String(decoding: template.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    private static func prepareStateDirectory(_ path: String) throws(SoftwareTPMError) -> String {
        do {
            try retryingInterrupts { mkdir(path, 0o700) }
        } catch  where error.rawValue == EEXIST {
            // Existing directory: keep its mode; it may already hold a persistent TPM.
        } catch {
            throw SoftwareTPMError(.stateDirectoryUnusable, "cannot create state directory \(path)", cause: error)
        }
        var info = stat()
        guard stat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFDIR else {
            throw SoftwareTPMError(.stateDirectoryUnusable, "state directory \(path) exists but is not a directory")
        }
        return path
    }
}

import KeychainStore
public import KeychainVocabulary
import Logging
import SystemCalls
public import TPM
import TPMSimulator

#if canImport(Glibc)
import Glibc
#endif

/// How a ``KeychainLocation`` finds the TPM that seals its store's master key.
public enum TPMChoice: Sendable, Hashable {
    /// `TPM_KEYCHAIN_TCTI` when set; else the simulated TPM the store was created with (its state
    /// in `<store>/swtpm`), if it was; else the hardware TPM at `/dev/tpmrm0` when this user may
    /// open it; else ``KeychainError/Code/tpmUnavailable``, with a message that says how to opt
    /// in to a simulated TPM.
    case automatic
    /// As ``automatic``, but where that would fail for want of a TPM, the store gets a simulated
    /// TPM of its own in `<store>/swtpm` (what `tpm-keychain` does on machines without a TPM).
    ///
    /// - Important: a simulated TPM binds nothing to hardware: its state is a file next to the
    ///   store, so a copy of the directory opens anywhere. Use it for development and CI.
    case automaticOrSimulated
    /// A tpm2-tss TCTI string, for example `swtpm:host=127.0.0.1,port=2321` or `device:/dev/tpm0`.
    case tcti(String)
    /// The TPM already chosen for this store by ``StoreTPM/choose(for:)``: a tool that opens a
    /// store for a command chooses once and passes the choice down, so nothing chooses again. A
    /// simulated TPM runs as long as any value sharing it does.
    case chosen(StoreTPM)
}

/// The TPM chosen for one store, with the simulated TPM started when that is the choice: one
/// policy for the library and the CLI (``TPMChoice``).
///
/// A simulated TPM runs only while this value is in use: ``stop()`` lets go of it, and the last
/// value of this process to let go shuts it down in order (TPM2_Shutdown) and lets the next
/// process start it. The library keeps one just long enough to open a store; the CLI keeps one
/// for a command.
public final class StoreTPM: Sendable, Hashable {
    /// Where the TPM came from.
    public enum Source: Sendable, Hashable {
        /// `TPM_KEYCHAIN_TCTI`.
        case environment
        /// A TCTI given in code (``TPMChoice/tcti(_:)``).
        case explicit
        /// The kernel's resource-managed TPM device.
        case hardware
        /// A swtpm started for this store, whose state is kept in `stateDirectory`.
        case simulatedInStore(stateDirectory: String)
    }

    /// The TCTI and timeouts to connect with.
    public let configuration: TPMConfiguration
    /// Where the TPM came from: the environment, code, the hardware, or the store's own simulator.
    public let source: Source
    /// How long starting the simulated TPM took; nil when none was started.
    public let simulatorStartup: Duration?
    private let running: Locked<Running?>

    /// A started simulator and the lock that makes it this process's alone, shared by every value
    /// of this process that chooses the same store's simulator while it runs: a device opened
    /// inside a store's write chooses again, and waiting for the lock its own process holds would
    /// wait out the timeout. Stopped when the last value lets go: the simulator first, then the
    /// lock (released as the property goes), so the next process never finds the state in use.
    /// Immutable; `SoftwareTPM.stop()` may be called from any thread.
    private final class Running: @unchecked Sendable {
        let simulator: SoftwareTPM
        let lock: LockFile

        init(simulator: SoftwareTPM, lock: LockFile) {
            self.simulator = simulator
            self.lock = lock
        }

        deinit { simulator.stop() }
    }

    /// What a weak reference needs to sit in a lock.
    private struct SharedSimulator: @unchecked Sendable {
        weak var running: Running?
    }

    /// The store simulators this process runs, by store path.
    private static let runningSimulators = Locked<[String: SharedSimulator]>([:])

    private init(
        configuration: TPMConfiguration, source: Source, simulatorStartup: Duration? = nil,
        running: Running? = nil
    ) {
        self.configuration = configuration
        self.source = source
        self.simulatorStartup = simulatorStartup
        self.running = Locked(running)
    }

    deinit { stop() }

    /// The same TPM: the same TCTI (a simulator's socket path is new for each start).
    public static func == (lhs: StoreTPM, rhs: StoreTPM) -> Bool {
        lhs === rhs || (lhs.configuration.tcti == rhs.configuration.tcti && lhs.source == rhs.source)
    }

    /// Hashes what `==` compares.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(configuration.tcti)
        hasher.combine(source)
    }

    /// Another value for this TPM, which keeps a simulated one running until it, too, lets go:
    /// what a store opened with ``TPMChoice/chosen(_:)`` uses, so that stopping it leaves the
    /// chooser's TPM running.
    private func sharing(logger: Logger) -> StoreTPM {
        let shared = running.withLock { $0 }
        var configuration = configuration
        configuration.logger = logger
        return StoreTPM(configuration: configuration, source: source, running: shared)
    }

    /// Whether nothing sealed with this TPM is bound to hardware: a swtpm or another simulator.
    public var isSimulated: Bool {
        if case .hardware = source { return false }
        return configuration.isSimulator
    }

    /// What store.meta records about this TPM when a store is created with it (and checks when one
    /// is opened): a store made on a TPM device never opens on a simulator.
    var kind: TPMKind {
        switch source {
        case .hardware: .device
        case .simulatedInStore: .simulatorInStore
        case .environment, .explicit: TPMKind(configuration)
        }
    }

    /// What store.meta is to record for a store made now: ``kind``, except that a TPM reached as
    /// a device which says it is software (its vendor strings, as systemd's swtpm behind
    /// /dev/tpmrm0 says) is recorded as a simulator. Asked once, at creation: opening a store
    /// sends the TPM nothing more for it. A TPM that cannot be asked keeps ``kind``.
    var kindForNewStore: TPMKind {
        guard kind == .device else { return kind }
        let described = try? {
            let connection = try TPMConnection(configuration)
            defer { connection.close() }
            return try connection.describe()
        }()
        return described?.isSimulator == true ? .simulator : .device
    }

    /// One line for people: where the TPM is and whether it is real.
    public var summary: String {
        switch source {
        case .environment:
            "\(configuration.tcti) from \(TPMConfiguration.environmentVariable), \(isSimulated ? "SIMULATED (not bound to hardware)" : "as configured")"
        case .explicit:
            "\(configuration.tcti), \(isSimulated ? "SIMULATED (not bound to hardware)" : "as configured")"
        case .hardware:
            "hardware TPM at \(configuration.tcti)"
        case .simulatedInStore(let directory):
            "SIMULATED: no hardware TPM is usable, so a private swtpm was started (state in \(directory)); secrets are not bound to hardware"
        }
    }

    /// Lets go of a simulated TPM: the last of this process's values to do so stops it in order
    /// and releases it for other processes. Idempotent; safe from any thread (the CLI calls it
    /// when interrupted).
    public func stop() {
        let released = running.withLock { running in
            defer { running = nil }
            return running
        }
        withExtendedLifetime(released) {}
    }

    /// The environment variable that lets the git helper and `KeychainStorage` create a store with
    /// a simulated TPM of its own when no TPM is usable (`1`); without it they fail, saying how to
    /// get a TPM, rather than keep secrets under a software TPM whose state sits next to them.
    public static let allowSimulatedVariable = "TPM_KEYCHAIN_ALLOW_SIMULATED"

    /// Whether ``allowSimulatedVariable`` is `1` in this process's environment.
    public static var simulationAllowedByEnvironment: Bool {
        getenv(allowSimulatedVariable).map { String(cString: $0) } == "1"
    }

    /// Chooses the TPM for `location` by its ``KeychainLocation/tpm`` and starts a simulated one
    /// when that is the choice.
    ///
    /// - Throws: ``KeychainError`` `.tpmUnavailable` when there is no TPM to use (the message says
    ///   how to opt in to a simulated one) or swtpm cannot start; `.timedOut` when another process
    ///   keeps the store's simulated TPM past the timeout; `.permissionDenied`, `.storageFailed`.
    public static func choose(for location: KeychainLocation) throws(KeychainError) -> StoreTPM {
        let stateDirectory = location.path + "/swtpm"
        switch location.tpm {
        case .chosen(let tpm):
            return tpm.sharing(logger: location.logger)
        case .tcti(let tcti):
            return StoreTPM(configuration: TPMConfiguration(tcti: tcti, logger: location.logger), source: .explicit)
        case .automatic, .automaticOrSimulated:
            if let tcti = TPMConfiguration.environmentTCTI {
                return StoreTPM(
                    configuration: TPMConfiguration(tcti: tcti, logger: location.logger), source: .environment)
            }
            var hasOwnSimulator = try simulatorStateIsOurs(stateDirectory, store: location.path)
            // The store's own simulator only for a store whose (authenticated, once opened)
            // metadata says it was made on it: a swtpm/ that appeared in a store made on the TPM
            // device is never used in its place. Stores from before that record keep the old rule.
            let recorded = hasOwnSimulator ? ItemStore.recordedTPMKind(at: location.path) : nil
            if hasOwnSimulator, let recorded, recorded != .simulatorInStore {
                location.logger.warning(
                    "Not using \(stateDirectory): the keychain at \(location.path) was created on \(recorded.description), not on that simulator"
                )
                hasOwnSimulator = false
            }
            if !hasOwnSimulator && TPMConfiguration.hardwareTPMIsUsable {
                return StoreTPM(
                    configuration: TPMConfiguration(tcti: TPMConfiguration.defaultTCTI, logger: location.logger),
                    source: .hardware)
            }
            if let recorded, recorded != .simulatorInStore {
                throw KeychainError(
                    .tpmUnavailable,
                    """
                    The keychain at \(location.path) was created on \(recorded.description), which is not usable by this user \
                    (is /dev/tpmrm0 there? is the user in group tss?), and \(TPMConfiguration.environmentVariable) is not set. \
                    The swtpm/ directory inside it is not that TPM and is not used (it is not part of this store: remove it)
                    """)
            }
            guard hasOwnSimulator || location.tpm == .automaticOrSimulated else {
                throw KeychainError(
                    .tpmUnavailable,
                    """
                    No TPM for the keychain at \(location.path): /dev/tpmrm0 is not usable by this user (is it there? \
                    is the user in group tss? sudo usermod -aG tss $USER, then log in again) and \
                    \(TPMConfiguration.environmentVariable) is not set. To keep this store with a simulated TPM instead \
                    (development, CI; nothing is bound to hardware, and a copy of the directory opens it): set \
                    \(Self.allowSimulatedVariable)=1, or open it with KeychainLocation(path:tpm: .automaticOrSimulated)
                    """)
            }
            return try startSimulator(for: location.path, stateDirectory: stateDirectory, logger: location.logger)
        }
    }

    /// Whether the store has a simulator state of its own that this user may use: a directory
    /// owned by this user (or, in a shared store, by the store's owner). One planted by someone
    /// else (who may keep a copy of its seeds) is refused, not used.
    ///
    /// - Throws: ``KeychainError`` `.unsafeFileSystem` for a `swtpm` that is not such a directory.
    private static func simulatorStateIsOurs(_ stateDirectory: String, store: String) throws(KeychainError) -> Bool {
        var state = stat()
        guard lstat(stateDirectory, &state) == 0 else { return false }
        var root = stat()
        let rootOwner = stat(store, &root) == 0 ? root.st_uid : geteuid()
        let sharedRoot = root.st_mode & 0o7777 == 0o2770
        guard state.st_mode & S_IFMT == S_IFDIR, state.st_uid == geteuid() || (sharedRoot && state.st_uid == rootOwner)
        else {
            throw KeychainError(
                .unsafeFileSystem,
                "\(stateDirectory) is not a simulated TPM's state this user made (a symbolic link, a file, or owned by user \(state.st_uid)): someone else may keep a copy of its seeds, so it is not used. Remove it"
            )
        }
        return true
    }

    /// The configuration for a store's own simulator (`swtpm:path=<directory>/<socket>`). Its TPM
    /// access lock file goes in the socket's directory: private, used by the one process that
    /// started the simulator, and removed with it. In the user's lock directory every run (a new
    /// socket path, so a new TCTI string) would leave a lock file of its own.
    private static func ownSimulatorConfiguration(tcti: String, logger: Logger) -> TPMConfiguration {
        let prefix = "swtpm:path="
        let socket = tcti.hasPrefix(prefix) ? tcti.dropFirst(prefix.count) : ""
        let directory = socket.lastIndex(of: "/").map { String(socket[..<$0]) }.flatMap { $0.isEmpty ? nil : $0 }
        return TPMConfiguration(tcti: tcti, lockDirectory: directory, logger: logger)
    }

    private static func startSimulator(
        for store: String, stateDirectory: String, logger: Logger
    ) throws(KeychainError) -> StoreTPM {
        if let shared = runningSimulators.withLock({ $0[store]?.running }) {
            return StoreTPM(
                configuration: ownSimulatorConfiguration(tcti: shared.simulator.tcti, logger: logger),
                source: .simulatedInStore(stateDirectory: stateDirectory), running: shared)
        }
        let timeout = TPMConfiguration.environmentTimeout ?? TPMConfiguration.defaultTimeout
        try Directory.createPath(store)
        // One swtpm per state directory, across processes: the others wait their turn.
        let lockPath = store + "/simulator.lock"
        let lock: LockFile
        do {
            lock = try LockFile(lockPath)
            guard try lock.lock(timeout: timeout) else {
                let holder = lock.holderProcessID.map { "process \($0)" } ?? "another process"
                throw KeychainError(
                    .timedOut,
                    "Waited \(timeout) for the simulated TPM of \(store); \(holder) still holds \(lockPath). If it is stuck, stop it and try again (\(TPMConfiguration.timeoutVariable) sets the wait in seconds)"
                )
            }
        } catch let error as KeychainError {
            throw error
        } catch let error as Errno where error.rawValue == EACCES || error.rawValue == EPERM {
            throw KeychainError(.permissionDenied, "Permission denied: cannot use \(lockPath)", underlying: error)
        } catch {
            throw KeychainError(.storageFailed, "Cannot lock \(lockPath)", underlying: error)
        }
        let clock = ContinuousClock()
        let start = clock.now
        let simulator: SoftwareTPM
        do {
            // A Unix socket in a private directory: a loopback TCP port would let every local
            // user send this TPM commands (exhaust its lockout counter, unseal with a copied store).
            // Resumed, not rebooted, by each command: an unlock lasts until lock-keychain, as on a
            // machine that is not restarted between two commands.
            simulator = try SoftwareTPM.start(
                .init(stateDirectory: stateDirectory, listensOnUnixSocket: true, resumesAcrossRuns: true))
        } catch {
            throw KeychainError(
                .tpmUnavailable, "Cannot start the simulated TPM of \(store): \(error)", underlying: error)
        }
        let running = Running(simulator: simulator, lock: lock)
        runningSimulators.withLock { shared in
            shared = shared.filter { $0.value.running != nil } // those of stores whose last value let go
            shared[store] = SharedSimulator(running: running)
        }
        return StoreTPM(
            configuration: ownSimulatorConfiguration(tcti: simulator.tcti, logger: logger),
            source: .simulatedInStore(stateDirectory: stateDirectory),
            simulatorStartup: clock.now - start, running: running)
    }
}

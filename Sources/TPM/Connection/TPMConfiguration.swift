public import Logging
import SystemCalls

#if canImport(Glibc)
import Glibc
#endif

/// Which TPM to talk to, as a tpm2-tss TCTI configuration string.
public struct TPMConfiguration: Sendable, Hashable {
    /// Where the TPM layer logs (debug level only); ``Logging/Logger/disabled`` unless given.
    /// Not part of equality: two configurations of the same TPM are the same TPM.
    public var logger: Logger = .disabled

    /// The environment variable that selects the TPM for every TPMKeychain program.
    public static let environmentVariable = "TPM_KEYCHAIN_TCTI"
    /// The kernel's resource-managed TPM device.
    public static let defaultTCTI = "device:/dev/tpmrm0"

    /// A TCTI string such as `device:/dev/tpmrm0` or `swtpm:host=127.0.0.1,port=2321`.
    public var tcti: String
    /// Whether something between us and the TPM (the kernel's `/dev/tpmrm*`, tpm2-abrmd) isolates
    /// each client's handles. Without one, TPMKeychain serialises its processes with a lock file and
    /// flushes handles a crashed process left behind.
    public var hasResourceManager: Bool
    /// Where the cross-process lock files live when there is no resource manager.
    public var lockDirectory: String
    /// The longest a TPM command, or a wait for another process's use of the TPM, may take before
    /// it fails with `.timedOut` or `.busy`. Enforced for socket TCTIs (swtpm, mssim) by cutting
    /// the connection; a device TPM is bounded by the kernel driver's own command timeouts.
    public var timeout: Duration

    /// The owner hierarchy's authorization, for TPMs whose owner set one (nil: empty, as on most
    /// machines). Only deriving the storage key and defining or deleting NV indices use it, in an
    /// HMAC session, so it is never sent in clear. A wrong one does not count toward the
    /// dictionary-attack lockout (the owner hierarchy is exempt). Not part of equality.
    public var ownerAuthorization: SecretBytes?

    /// The environment variable that gives ``ownerAuthorization`` (read when a configuration is made).
    public static let ownerAuthorizationVariable = "TPM_KEYCHAIN_OWNER_AUTH"
    /// The environment variable that names a file holding ``ownerAuthorization`` (one line), for
    /// when ``ownerAuthorizationVariable`` is not set: a file no other user can read keeps the
    /// password out of the environment, which every child process inherits and `/proc` shows to
    /// whoever may ptrace the process. A systemd credential (`$CREDENTIALS_DIRECTORY/...`) is such a file.
    public static let ownerAuthorizationFileVariable = "TPM_KEYCHAIN_OWNER_AUTH_FILE"
    /// The longest owner password file read.
    static let maximumOwnerAuthorizationFileSize = 1024

    /// The environment variable that overrides the default ``timeout``, in seconds.
    public static let timeoutVariable = "TPM_KEYCHAIN_TIMEOUT"
    /// ``timeout`` unless `TPM_KEYCHAIN_TIMEOUT` says otherwise.
    public static let defaultTimeout: Duration = .seconds(30)

    /// - Parameters:
    ///   - tcti: the TCTI configuration string.
    ///   - hasResourceManager: derived from `tcti` when nil.
    ///   - lockDirectory: defaults to `$XDG_RUNTIME_DIR/tpm-keychain`, else `/run/user/<uid>/tpm-keychain`,
    ///     else `~/.cache/tpm-keychain` (never a name other users could create first).
    ///   - timeout: nil for `TPM_KEYCHAIN_TIMEOUT` (seconds) when set, else 30 seconds.
    ///   - logger: where the TPM layer logs; ``Logging/Logger/disabled`` drops everything.
    ///   - ownerAuthorization: nil for `TPM_KEYCHAIN_OWNER_AUTH` when set, else the file
    ///     `TPM_KEYCHAIN_OWNER_AUTH_FILE` names (a file that cannot be used is logged as an error
    ///     and gives none), else none.
    public init(
        tcti: String, hasResourceManager: Bool? = nil, lockDirectory: String? = nil, timeout: Duration? = nil,
        logger: Logger = .disabled, ownerAuthorization: SecretBytes? = nil
    ) {
        self.logger = logger
        self.ownerAuthorization = ownerAuthorization ?? Self.environmentOwnerAuthorization(logger: logger)
        self.tcti = tcti
        self.hasResourceManager = hasResourceManager ?? Self.impliesResourceManager(tcti)
        self.lockDirectory = lockDirectory ?? Self.defaultLockDirectory()
        self.timeout = timeout ?? Self.environmentTimeout ?? Self.defaultTimeout
    }

    /// `TPM_KEYCHAIN_OWNER_AUTH`, else the contents of `TPM_KEYCHAIN_OWNER_AUTH_FILE`; nil when
    /// neither gives a password.
    private static func environmentOwnerAuthorization(logger: Logger) -> SecretBytes? {
        if let value = getenv(ownerAuthorizationVariable) {
            let text = String(cString: value)
            return text.isEmpty ? nil : SecretBytes(copying: Array(text.utf8))
        }
        guard let path = getenv(ownerAuthorizationFileVariable).map({ String(cString: $0) }), !path.isEmpty else {
            return nil
        }
        do {
            return try ownerAuthorization(fromFile: path)
        } catch {
            logger.error("\(ownerAuthorizationFileVariable): \(error.message)")
            return nil
        }
    }

    /// The owner password in the file at `path`: its first line, without the line break. The file
    /// must be a regular file (not a symbolic link) that belongs to this user or to root and that
    /// no other user can read or write.
    ///
    /// - Returns: nil for an empty file (the owner hierarchy has no password).
    /// - Throws: ``TPMError`` `.invalidArgument` for a file that cannot be used, naming why.
    public static func ownerAuthorization(fromFile path: String) throws(TPMError) -> SecretBytes? {
        let descriptor = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)
        guard descriptor >= 0 else {
            let reason = errno == ELOOP ? "it is a symbolic link" : String(cString: strerror(errno))
            throw TPMError(.invalidArgument, "Cannot read the owner password file \(path): \(reason)")
        }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0, status.st_mode & S_IFMT == S_IFREG else {
            throw TPMError(.invalidArgument, "The owner password file \(path) is not a regular file")
        }
        guard status.st_uid == PrivateOwnership.effectiveUser || status.st_uid == 0 else {
            throw TPMError(
                .invalidArgument,
                "The owner password file \(path) belongs to user \(status.st_uid), not to this user or root: refusing to use it"
            )
        }
        guard status.st_mode & 0o007 == 0 else {
            throw TPMError(
                .invalidArgument,
                "The owner password file \(path) has mode \(String(status.st_mode & 0o777, radix: 8)): other users can read or change it; chmod 600 it (or 400)"
            )
        }
        guard Int(status.st_size) <= maximumOwnerAuthorizationFileSize else {
            throw TPMError(
                .invalidArgument,
                "The owner password file \(path) is larger than \(maximumOwnerAuthorizationFileSize) bytes")
        }
        var buffer = [UInt8](repeating: 0, count: maximumOwnerAuthorizationFileSize + 1)
        defer { buffer.withUnsafeMutableBytes { secureZero($0) } }
        var count = 0
        while count < buffer.count {
            let read = buffer.withUnsafeMutableBytes { raw in
                Glibc.read(descriptor, raw.baseAddress! + count, raw.count - count)
            }
            if read < 0 && errno == EINTR { continue }
            guard read >= 0 else {
                throw TPMError(
                    .invalidArgument, "Cannot read the owner password file \(path): \(String(cString: strerror(errno)))"
                )
            }
            if read == 0 { break }
            count += read
        }
        guard count <= maximumOwnerAuthorizationFileSize else {
            throw TPMError(
                .invalidArgument,
                "The owner password file \(path) is larger than \(maximumOwnerAuthorizationFileSize) bytes")
        }
        let line = buffer[..<count].firstIndex(of: UInt8(ascii: "\n")) ?? count
        let end = line > 0 && buffer[line - 1] == UInt8(ascii: "\r") ? line - 1 : line
        return end == 0
            ? nil : buffer.withUnsafeBytes { SecretBytes(copying: UnsafeRawBufferPointer(rebasing: $0[..<end])) }
    }

    /// `TPM_KEYCHAIN_TIMEOUT` as a duration, when it holds a positive number of seconds.
    public static var environmentTimeout: Duration? {
        guard let text = getenv(timeoutVariable).map({ String(cString: $0) }), let seconds = Double(text),
            seconds > 0, seconds.isFinite
        else { return nil }
        return .milliseconds(Int64(seconds * 1000))
    }

    /// Equal TPM, lock directory and timeout; the logger is not compared.
    public static func == (lhs: TPMConfiguration, rhs: TPMConfiguration) -> Bool {
        lhs.tcti == rhs.tcti && lhs.hasResourceManager == rhs.hasResourceManager
            && lhs.lockDirectory == rhs.lockDirectory
            && lhs.timeout == rhs.timeout
    }

    /// Hashes what `==` compares.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(tcti)
        hasher.combine(hasResourceManager)
        hasher.combine(lockDirectory)
        hasher.combine(timeout)
    }

    /// `TPM_KEYCHAIN_TCTI` when set and not empty, else ``defaultTCTI``.
    public static func fromEnvironment() -> TPMConfiguration {
        TPMConfiguration(tcti: environmentTCTI ?? defaultTCTI)
    }

    /// The value of `TPM_KEYCHAIN_TCTI`, if set and not empty.
    public static var environmentTCTI: String? {
        guard let value = getenv(environmentVariable).map({ String(cString: $0) }), !value.isEmpty else { return nil }
        return value
    }

    /// Whether the kernel exposes a resource-managed TPM this process may open read-write.
    public static var hardwareTPMIsUsable: Bool {
        access("/dev/tpmrm0", R_OK | W_OK) == 0
    }

    /// Whether the TCTI names a simulator rather than a device: `swtpm`, `mssim`, or their
    /// libraries named in full (`libtss2-tcti-swtpm.so.0:...`, with or without a directory).
    public var isSimulator: Bool {
        let module = tcti.prefix { $0 != ":" }.split(separator: "/").last.map(String.init) ?? ""
        let name = module.hasPrefix("libtss2-tcti-") ? String(module.dropFirst("libtss2-tcti-".count)) : module
        return name.hasPrefix("swtpm") || name.hasPrefix("mssim")
    }

    private static func impliesResourceManager(_ tcti: String) -> Bool {
        if tcti.hasPrefix("tabrmd") || closeHook(tcti) != nil { return true }
        if tcti.hasPrefix("device") { return tcti.contains("tpmrm") || tcti == "device" }
        return false
    }

    /// Makes configurations made later in this process for `tcti` (without saying) treat it as
    /// behind a resource manager, and runs `onClose` after each of their connections closes:
    /// test support, so that a test can count what a client sends to /dev/tpmrm0 on a swtpm,
    /// with `onClose` flushing what the connection left loaded, as the kernel does for a closed
    /// file (TPMKeychainTesting's `RecordingTPMProxy.flushLeftovers()`).
    package static func treatAsResourceManaged(_ tcti: String, onClose: @escaping @Sendable () -> Void) {
        resourceManagedTCTIs.withLock { $0[tcti] = onClose }
    }

    /// Ends ``treatAsResourceManaged(_:onClose:)`` for `tcti` (before its proxy stops).
    package static func stopTreatingAsResourceManaged(_ tcti: String) {
        _ = resourceManagedTCTIs.withLock { $0.removeValue(forKey: tcti) }
    }

    /// What ``treatAsResourceManaged(_:onClose:)`` asked to run when a connection to `tcti` closes.
    static func closeHook(_ tcti: String) -> (@Sendable () -> Void)? {
        resourceManagedTCTIs.withLock { $0[tcti] }
    }

    private static let resourceManagedTCTIs = Locked<[String: @Sendable () -> Void]>([:])

    /// Removes the TPM access lock file of `tcti` from the default lock directory, unless it is
    /// held: for a simulator that stopped, whose TCTI (a port, a socket path) no TPM answers any
    /// more. Each test's simulator would otherwise leave one file behind for good.
    ///
    /// - Returns: whether a file was removed.
    @discardableResult
    package static func removeUnusedAccessLock(tcti: String) -> Bool {
        TPMAccessLock.removeUnused(tcti: tcti, in: defaultLockDirectory())
    }

    /// Once per process: removes the lock files of the default lock directory that nobody has
    /// taken for a day and nobody holds (``TPMAccessLock``), which stopped simulators of earlier
    /// versions left behind. For test support, which starts simulators.
    ///
    /// - Returns: how many were removed by this call (0 after the first).
    @discardableResult
    package static func removeStaleAccessLocksOnce() -> Int {
        let first = staleLocksSwept.withLock { swept in
            defer { swept = true }
            return !swept
        }
        guard first else { return 0 }
        return TPMAccessLock.removeStale(in: defaultLockDirectory(), olderThan: .seconds(24 * 3600))
    }

    private static let staleLocksSwept = Locked(false)

    /// A directory no other user can create first: `$XDG_RUNTIME_DIR`, else the user's
    /// `/run/user/<uid>` when it is theirs, else `$XDG_CACHE_HOME` or `~/.cache`. A fixed name in
    /// a world-writable directory such as /tmp could be squatted by any local user (a directory or
    /// symlink made in advance), denying every TPM operation; it is the last resort, for users
    /// without a home, and refused with a clear message when it is not ours.
    private static func defaultLockDirectory() -> String {
        func environment(_ name: String) -> String? {
            getenv(name).map { String(cString: $0) }.flatMap { $0.hasPrefix("/") ? $0 : nil }
        }
        if let runtime = environment("XDG_RUNTIME_DIR") { return runtime + "/tpm-keychain" }
        let userRuntime = "/run/user/\(PrivateOwnership.effectiveUser)"
        if PrivateOwnership.isPrivateDirectory(userRuntime) { return userRuntime + "/tpm-keychain" }
        if let cache = environment("XDG_CACHE_HOME") { return cache + "/tpm-keychain" }
        if let home = environment("HOME"), home != "/", access(home, W_OK) == 0 { return home + "/.cache/tpm-keychain" }
        return "/tmp/tpm-keychain-\(getuid())"
    }
}

#if canImport(Glibc)
import Glibc
#endif

/// Which TPM to talk to, as a tpm2-tss TCTI configuration string.
public struct TPMConfiguration: Sendable, Hashable {
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

    /// - Parameters:
    ///   - tcti: the TCTI configuration string.
    ///   - hasResourceManager: derived from `tcti` when nil.
    ///   - lockDirectory: defaults to `$XDG_RUNTIME_DIR/tpm-keychain`, else `/tmp/tpm-keychain-<uid>`.
    public init(tcti: String, hasResourceManager: Bool? = nil, lockDirectory: String? = nil) {
        self.tcti = tcti
        self.hasResourceManager = hasResourceManager ?? Self.impliesResourceManager(tcti)
        self.lockDirectory = lockDirectory ?? Self.defaultLockDirectory()
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

    /// Whether the TCTI names a simulator rather than a device.
    public var isSimulator: Bool {
        tcti.hasPrefix("swtpm") || tcti.hasPrefix("mssim")
    }

    private static func impliesResourceManager(_ tcti: String) -> Bool {
        if tcti.hasPrefix("tabrmd") { return true }
        if tcti.hasPrefix("device") { return tcti.contains("tpmrm") || tcti == "device" }
        return false
    }

    private static func defaultLockDirectory() -> String {
        if let runtime = getenv("XDG_RUNTIME_DIR").map({ String(cString: $0) }), runtime.hasPrefix("/") {
            return runtime + "/tpm-keychain"
        }
        return "/tmp/tpm-keychain-\(getuid())"
    }
}

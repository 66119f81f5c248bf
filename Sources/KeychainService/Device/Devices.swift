import Crypto
import FoundationEssentials
import KeychainStore
import KeychainVocabulary
import SystemCalls
import TPM

#if canImport(Glibc)
import Glibc
#endif

/// The device of a location: its TPM chosen as for the store, its directory resolved
/// (``KeychainLocation/deviceDirectory``).
enum Devices {
    /// Directories already resolved, by store path: resolving may ask the TPM for its storage key.
    private static let directories = Locked<[String: String]>([:])

    /// Runs `body` with the device, the TPM started for it when simulated and stopped after.
    static func with<R>(
        _ location: KeychainLocation, _ body: (Device) throws(KeychainError) -> R
    ) throws(KeychainError) -> R {
        let tpm = try StoreTPM.choose(for: location)
        defer { tpm.stop() }
        let directory = try directory(for: location, tpm: tpm)
        return try body(Device(directory: directory, tpm: tpm.configuration))
    }

    /// Whether the location's device has a passcode: a file read, without starting a simulated
    /// TPM when the device directory is known without one.
    static func passcodeIsSet(_ location: KeychainLocation) throws(KeychainError) -> Bool {
        if let directory = knownDirectory(location) {
            return try Device.passcodeIsSet(directory: directory)
        }
        return try with(location) { (device) throws(KeychainError) in try device.passcodeIsSet() }
    }

    /// The device directory, when it is known without choosing (or starting) a TPM.
    static func knownDirectory(_ location: KeychainLocation) -> String? {
        if let explicit = location.deviceDirectory { return explicit }
        // getenv, not ProcessInfo's environment: that builds a dictionary of every variable, and
        // this runs on each write of a lock-bound item (a tenth of a durable set's CPU time).
        if let environment = getenv("TPM_KEYCHAIN_DEVICE_DIR").map({ String(cString: $0) }), environment.hasPrefix("/")
        {
            return environment
        }
        if let known = directories.withLock({ $0[location.path] }) { return known }
        switch location.tpm {
        case .tcti: return nil
        case .chosen(let tpm):
            if case .simulatedInStore = tpm.source { return location.path + "/device" }
            return nil
        case .automatic, .automaticOrSimulated: break
        }
        // StoreTPM's policy: the environment's TPM first, then the store's own simulator.
        if TPMConfiguration.environmentTCTI == nil, FileManager.default.fileExists(atPath: location.path + "/swtpm") {
            return location.path + "/device"
        }
        return nil
    }

    static func directory(for location: KeychainLocation, tpm: StoreTPM) throws(KeychainError) -> String {
        if let known = knownDirectory(location) { return known }
        if case .simulatedInStore = tpm.source { return location.path + "/device" }
        // One directory per TPM, named by its storage key (which changes when the TPM is cleared,
        // as its NV counters do).
        let name: [UInt8]
        do {
            let connection = try TPMConnection(tpm.configuration)
            defer { connection.close() }
            name = try connection.storageKey().name
        } catch {
            throw KeychainError(deviceTPM: error)
        }
        let digest = Array(SHA256.hash(data: name).prefix(8)).hexString
        let resolved = stateDirectory + "/device-" + digest
        directories.withLock { $0[location.path] = resolved }
        return resolved
    }

    /// `$XDG_STATE_HOME/tpm-keychain`, else `~/.local/state/tpm-keychain`.
    static var stateDirectory: String {
        let environment = ProcessInfo.processInfo.environment
        if let state = environment["XDG_STATE_HOME"], state.hasPrefix("/") { return state + "/tpm-keychain" }
        let home =
            environment["HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil }
            ?? FileManager.default.homeDirectoryForCurrentUser.path
        return home + "/.local/state/tpm-keychain"
    }
}

internal import CTSS2
import Logging
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The ESAPI context of one connection and everything loaded through it.
///
/// Not thread-safe, like ESAPI itself: it is only ever reached through ``TPMConnection``'s lock.
/// Every transient object and session it creates is flushed before the call that created it
/// returns, on error paths too; only the storage root key stays loaded until ``shutDown()``.
final class Engine {
    let configuration: TPMConfiguration
    private(set) var esys: OpaquePointer
    private var tcti: OpaquePointer?
    private let accessLock: TPMAccessLock?
    /// Off only in tests that show what the bus carries without it.
    let parameterEncryption: Bool
    /// Where the storage key's context is kept between processes, if anywhere.
    let contextCache: (any StorageKeyContextCache)?
    /// How long any TPM round trip through this engine may take.
    let deadline: CommandDeadline
    var storageKeys: [StorageKeyAlgorithm: StorageRootKey] = [:]
    /// ESAPI handles of the NV indices this connection used, so each is read (NV_ReadPublic) once
    /// per connection, not once per command; see ``withNVIndex(_:fresh:_:)``.
    var nvHandles: [UInt32: ESYS_TR] = [:]
    /// The kept NV handles whose names the TPM vouched for in this connection.
    var confirmedNVIndices: Set<UInt32> = []
    /// A used transient object whose flush a resource manager makes unnecessary if the connection
    /// closes first; see ``withFlushing(_:_:)``.
    var objectAwaitingFlush: ESYS_TR?
    /// The HMAC sessions kept for the connection's commands; see ``withHMACSession(saltedWith:_:)``.
    var sharedSessions: (salted: ESYS_TR?, unsalted: ESYS_TR?) = (nil, nil)
    /// No stale-handle sweep ran at connect, because the access lock's last holder closed cleanly.
    /// What a program that does not take the lock left (tpm2-tools, another TSS) is then swept
    /// only once a command finds the TPM full; see ``withRoomForHandle(_:)``.
    var sweepDeferred = false
    /// The TPM handles this connection loaded or started while the sweep is deferred, which that
    /// sweep leaves alone.
    var ownHandles: Set<TPM2_HANDLE> = []
    /// Whether the TPM refused a flush: something of this connection may still be loaded, so its
    /// close is not clean.
    var flushRefused = false

    init(configuration: TPMConfiguration, parameterEncryption: Bool, contextCache: (any StorageKeyContextCache)?) throws
    {
        self.configuration = configuration
        self.parameterEncryption = parameterEncryption
        self.contextCache = contextCache
        deadline = CommandDeadline(configuration)
        Self.quietTSSLogging
        ESAPICryptoContext.install()
        Self.reportCryptoContext(configuration.logger)
        accessLock = configuration.hasResourceManager ? nil : try TPMAccessLock(configuration: configuration)

        var loadedTCTI: OpaquePointer?
        // The swtpm TCTI already asks the simulator's control channel while it initialises.
        let alarm = deadline.arm()
        let tctiRC = Tss2_TctiLdr_Initialize(TCTILibraries.loaderConfiguration(for: configuration.tcti), &loadedTCTI)
        alarm?.disarm()
        if let alarm, alarm.hasFired {
            if tctiRC == TSS2_RC_SUCCESS { Tss2_TctiLdr_Finalize(&loadedTCTI) }
            throw alarm.translate(TPMError(.tpmUnavailable, "connecting"), while: "connecting to the TPM")
        }
        guard tctiRC == TSS2_RC_SUCCESS, let loadedTCTI else {
            throw Self.connectionError(tctiRC, configuration: configuration)
        }
        // Before anything is loaded through it: a child started from now on does not inherit it.
        _ = ctss2_tcti_mark_close_on_exec(loadedTCTI)
        var context: OpaquePointer?
        let esysRC = Esys_Initialize(&context, loadedTCTI, nil)
        guard esysRC == TSS2_RC_SUCCESS, let context else {
            var doomed: OpaquePointer? = loadedTCTI
            Tss2_TctiLdr_Finalize(&doomed)
            throw TPMError(responseCode: esysRC, operation: "Esys_Initialize")
        }
        esys = context
        tcti = loadedTCTI
        // tpm2-tss 4.x: this context's crypto over the one shared OpenSSL context. Refused, it
        // keeps the built-in backend: correct, only slower.
        let callbacksRC = ESAPICryptoContext.configure(UnsafeMutableRawPointer(context))
        if callbacksRC != TSS2_RC_SUCCESS {
            configuration.logger.warning(
                "ESAPI refused the crypto callbacks; using its own backend",
                metadata: [
                    "rc": "0x\(String(callbacksRC, radix: 16))"
                ])
        }
        if accessLock?.previousHolderClosedCleanly == true {
            sweepDeferred = true
        } else if !configuration.hasResourceManager {
            do {
                try deadline.guarding("flushing handles a dead process left") { try flushStaleHandles() }
            } catch let error as TPMError where error.code == .timedOut {
                abandon()
                throw error
            } catch {
                shutDown()
                throw error
            }
        }
    }

    /// Why connecting failed, in terms of where the TCTI came from: a user who set
    /// `TPM_KEYCHAIN_TCTI` is told to check it; a TCTI given in code is not blamed on the environment.
    private static func connectionError(_ rc: TSS2_RC, configuration: TPMConfiguration) -> TPMError {
        let cause = TPMError(responseCode: rc, operation: "Tss2_TctiLdr_Initialize")
        let tcti = configuration.tcti
        let fromEnvironment = TPMConfiguration.environmentTCTI == tcti
        let origin = fromEnvironment ? " (from \(TPMConfiguration.environmentVariable))" : ""
        let base = rc & 0xFFFF
        if base == UInt32(TSS2_BASE_RC_BAD_VALUE) || base == UInt32(TSS2_BASE_RC_NOT_SUPPORTED) {
            return TPMError(
                .invalidArgument,
                "The TCTI '\(tcti)'\(origin) is malformed or names no installed TCTI; examples: device:/dev/tpmrm0, swtpm:host=127.0.0.1,port=2321, swtpm:path=/run/user/1000/swtpm.sock",
                operation: "connecting to \(tcti)", layer: cause.layer, responseCode: cause.responseCode,
                decodedResponse: cause.decodedResponse)
        }
        var advice: String
        if tcti.hasPrefix("device") {
            advice =
                "check that the device exists and that this user may read and write it (usually: member of group tss)"
        } else {
            advice = "check that the simulator or TPM server is running there"
        }
        if fromEnvironment { advice += ", or change \(TPMConfiguration.environmentVariable)" }
        return TPMError(
            .tpmUnavailable, "No TPM answered at '\(tcti)'\(origin): \(advice)",
            operation: "connecting to \(tcti)", layer: cause.layer, responseCode: cause.responseCode,
            decodedResponse: cause.decodedResponse)
    }

    /// tpm2-tss prints every failed command to stderr; this layer reports typed errors instead, so
    /// its log is off unless the user asked for it with TSS2_LOG.
    /// Says once per process, to the first caller's logger, whether ESAPI shares one OpenSSL
    /// context (a process-wide change to libtss2-esys, which other ESAPI users in the process see too).
    private static func reportCryptoContext(_ logger: Logger) {
        guard !cryptoContextReported.exchange(true, ordering: .relaxed) else { return }
        logger.debug(
            "ESAPI crypto context: \(ESAPICryptoContext.status)",
            metadata: [
                "library": "\(ESAPICryptoContext.library ?? "none")"
            ])
    }

    private static let cryptoContextReported = Atomic<Bool>(false)

    private static let quietTSSLogging: Void = {
        setenv("TSS2_LOG", "all+NONE", 0)
    }()

    /// Flushes the shared sessions and the storage keys, finalizes ESAPI and the TCTI, and
    /// releases the access lock.
    ///
    /// Behind a resource manager (the kernel's /dev/tpmrm0, tpm2-abrmd) nothing is flushed: the
    /// manager flushes every object and session of a connection when it closes, so the flushes
    /// would only cost a real TPM one command each.
    func shutDown() {
        let wasOpen = tcti != nil
        defer { if wasOpen, let hook = TPMConfiguration.closeHook(configuration.tcti) { hook() } }
        if tcti != nil && !configuration.hasResourceManager {
            flushSharedSessions()
            for key in storageKeys.values where !key.isPersistent { flush(key.handle) }
            if !flushRefused { accessLock?.recordCleanClose() }
        }
        abandon()
    }

    /// Releases ESAPI and the TCTI without sending the TPM anything (it stopped answering): the
    /// storage keys stay loaded until the next connection's stale-handle sweep or a TPM restart.
    func abandon() {
        storageKeys.removeAll()
        nvHandles.removeAll() // freed with the context
        confirmedNVIndices.removeAll()
        objectAwaitingFlush = nil
        sharedSessions = (nil, nil)
        guard tcti != nil else { return }
        var context: OpaquePointer? = esys
        Esys_Finalize(&context)
        Tss2_TctiLdr_Finalize(&tcti)
        tcti = nil
    }

    deinit { shutDown() }

    /// The SAPI context under ESAPI, for the two things ESAPI cannot do: flush a raw handle it
    /// never created, and scrub its own response buffer.
    func systemContext() throws(TPMError) -> OpaquePointer {
        var sys: OpaquePointer?
        try check(Esys_GetSysContext(esys, &sys), "Esys_GetSysContext")
        guard let sys else { throw TPMError(.other, "ESAPI has no SAPI context") }
        return sys
    }

    /// Overwrites the decrypted response parameters ESAPI leaves in its command buffer, so an
    /// unsealed secret does not outlive the call in the TSS's memory.
    func scrubResponseBuffer() {
        guard let sys = try? systemContext() else { return }
        var size = 0
        var buffer: UnsafePointer<UInt8>?
        guard Tss2_Sys_GetRpBuffer(sys, &size, &buffer) == TSS2_RC_SUCCESS, let buffer, size > 0 else { return }
        secureZero(UnsafeMutableRawPointer(mutating: buffer), count: size)
    }

    /// The response parameters currently in ESAPI's buffer (tests check that secrets were scrubbed).
    func responseBufferContents() -> [UInt8] {
        guard let sys = try? systemContext() else { return [] }
        var size = 0
        var buffer: UnsafePointer<UInt8>?
        guard Tss2_Sys_GetRpBuffer(sys, &size, &buffer) == TSS2_RC_SUCCESS, let buffer else { return [] }
        return Array(UnsafeBufferPointer(start: buffer, count: size))
    }

    /// Runs `body` with a transient object handle and flushes the object afterwards, whatever happens.
    ///
    /// Behind a resource manager the flush waits: the object is flushed before the next one is
    /// loaded (``flushObjectAwaitingFlush()``), or not at all when the connection closes first
    /// (the manager flushes it then). A connection that uses one object, as most do, saves the
    /// command, and at most one such object is ever left loaded beside the storage key.
    func withFlushing<R>(_ handle: ESYS_TR, _ body: (ESYS_TR) throws -> R) throws -> R {
        defer {
            if configuration.hasResourceManager { objectAwaitingFlush = handle } else { flush(handle) }
        }
        return try body(handle)
    }

    /// Flushes the object ``withFlushing(_:_:)`` left loaded behind a resource manager, if any:
    /// called before another object is loaded.
    func flushObjectAwaitingFlush() {
        guard let pending = objectAwaitingFlush else { return }
        objectAwaitingFlush = nil
        flush(pending)
    }

    /// Flushes a transient object or session; if the TPM refuses, ESAPI's record is closed anyway.
    func flush(_ handle: ESYS_TR) {
        var handle = handle
        if Esys_FlushContext(esys, handle) != TSS2_RC_SUCCESS {
            flushRefused = true
            _ = Esys_TR_Close(esys, &handle)
        }
    }

    /// Sends a command that takes an object or session slot (`body` returns the new handle).
    ///
    /// When the sweep was deferred (``sweepDeferred``) and the TPM has no slot left, whatever
    /// fills it was not loaded through the access lock, or this connection would know it: a
    /// program that does not take the lock left it. It is swept, this connection's own handles
    /// kept, and the command sent once more.
    func withRoomForHandle(_ body: () throws(TPMError) -> ESYS_TR) throws(TPMError) -> ESYS_TR {
        guard sweepDeferred else { return try body() }
        let handle: ESYS_TR
        do {
            handle = try body()
        } catch  where error.layer == .tpm && ResponseCodes.outOfHandleSpace.contains(error.responseCode & 0xFFF) {
            sweepDeferred = false
            do {
                try flushStaleHandles(keeping: ownHandles)
            } catch {
                throw error as? TPMError ?? TPMError(.other, "Sweeping handles left on the TPM failed: \(error)")
            }
            return try body()
        }
        var tpmHandle = TPM2_HANDLE(0)
        if Esys_TR_GetTpmHandle(esys, handle, &tpmHandle) == TSS2_RC_SUCCESS { ownHandles.insert(tpmHandle) }
        return handle
    }
}

internal import CESAPICryptoContext

/// The OpenSSL library context ESAPI's crypto backend uses: one, made the first time ESAPI asks,
/// instead of a new one for each hash and HMAC (CESAPICryptoContext's header says how and why).
package enum ESAPICryptoContext {
    /// Why ESAPI does or does not share one context. Anything but `installed` leaves ESAPI as it
    /// was built: correct, only slower.
    package enum Status: Sendable, Equatable, CustomStringConvertible {
        /// ``install()`` has not run in this process yet.
        case notAttempted
        /// tpm2-tss 3.x: libtss2-esys's import slots lead to the shared context.
        case installed
        /// tpm2-tss 4.x: each ESAPI context gets crypto callbacks over the shared context
        /// (`Esys_SetCryptoCallbacks`); nothing is patched.
        case callbacks
        /// `TPM_KEYCHAIN_ESYS_SHARED_CONTEXT=0` is set.
        case disabledByEnvironment
        /// No libtss2-esys loaded as a shared library.
        case libraryNotFound
        /// libcrypto lacks `OSSL_LIB_CTX_new`/`free`, or libtss2-esys does not import them.
        case symbolsMissing
        /// Neither x86_64 nor arm64.
        case unsupportedArchitecture
        /// A libtss2-esys SONAME other than tpm2-tss 3.x and 4.x's.
        case unsupportedVersion
        /// Its import slots are not as expected: bound to another libcrypto, repointed already,
        /// more of them than expected, or the functions' addresses kept elsewhere.
        case slotCheckFailed
        /// The slots' page protection could not be lifted or put back.
        case protectionFailed

        fileprivate init(_ status: CESAPICryptoContextStatus) {
            switch status {
            case CESAPICryptoContextInstalled: self = .installed
            case CESAPICryptoContextCallbacks: self = .callbacks
            case CESAPICryptoContextDisabledByEnvironment: self = .disabledByEnvironment
            case CESAPICryptoContextLibraryNotFound: self = .libraryNotFound
            case CESAPICryptoContextSymbolsMissing: self = .symbolsMissing
            case CESAPICryptoContextUnsupportedArchitecture: self = .unsupportedArchitecture
            case CESAPICryptoContextUnsupportedVersion: self = .unsupportedVersion
            case CESAPICryptoContextSlotCheckFailed: self = .slotCheckFailed
            case CESAPICryptoContextProtectionFailed: self = .protectionFailed
            default: self = .notAttempted
            }
        }

        private var cValue: CESAPICryptoContextStatus {
            switch self {
            case .notAttempted: CESAPICryptoContextNotAttempted
            case .installed: CESAPICryptoContextInstalled
            case .callbacks: CESAPICryptoContextCallbacks
            case .disabledByEnvironment: CESAPICryptoContextDisabledByEnvironment
            case .libraryNotFound: CESAPICryptoContextLibraryNotFound
            case .symbolsMissing: CESAPICryptoContextSymbolsMissing
            case .unsupportedArchitecture: CESAPICryptoContextUnsupportedArchitecture
            case .unsupportedVersion: CESAPICryptoContextUnsupportedVersion
            case .slotCheckFailed: CESAPICryptoContextSlotCheckFailed
            case .protectionFailed: CESAPICryptoContextProtectionFailed
            }
        }

        /// One short sentence, e.g. "ESAPI shares one OpenSSL library context".
        package var description: String {
            String(cString: cesapi_crypto_context_status_description(cValue))
        }
    }

    /// Points libtss2-esys at the shared context, once per process; every ``Engine`` calls it
    /// before using ESAPI. False, with ``status`` saying why, leaves ESAPI as it was built.
    @discardableResult
    package static func install() -> Bool {
        cesapi_crypto_context_install()
    }

    /// For this project's own processes (the CLI, the git helper) only, first thing in `main`:
    /// libcrypto skips its legacy name tables and openssl.cnf, which nothing in them uses (ESAPI's
    /// crypto runs in the private context, swift-crypto on BoringSSL). About 0.7 ms of a lookup.
    /// A library must not call it: its host's OpenSSL calls may need both.
    @discardableResult
    package static func startOpenSSLLean() -> Bool {
        cesapi_openssl_start_lean()
    }

    /// Gives a new ESAPI context (an `ESYS_CONTEXT *`) the crypto callbacks when ``status`` is
    /// `callbacks`; does nothing otherwise.
    ///
    /// - Returns: `Esys_SetCryptoCallbacks`'s response code, 0 when set or nothing to do; after a
    ///   failure the context keeps ESAPI's built-in backend.
    package static func configure(_ esysContext: UnsafeMutableRawPointer) -> UInt32 {
        cesapi_crypto_callbacks_set(esysContext)
    }

    /// Whether ESAPI's crypto goes through the one shared context, by either means.
    package static var isShared: Bool { status == .installed || status == .callbacks }

    /// The callbacks' table (tpm2-tss 4.x's `ESYS_CRYPTO_CALLBACKS` layout), for tests that call
    /// them directly; nil when OpenSSL could not give them their algorithms.
    package static var callbackTable: UnsafeRawPointer? { cesapi_crypto_callbacks() }

    /// The outcome of ``install()``, fixed once it has run; `notAttempted` before.
    package static var status: Status {
        Status(cesapi_crypto_context_status())
    }

    /// The libtss2-esys looked at, for the log: SONAME, tpm2-tss major version and build ID.
    /// Nil before ``install()`` has run or when none was found.
    package static var library: String? {
        let library = String(cString: cesapi_crypto_context_library())
        return library.isEmpty ? nil : library
    }

    /// How many contexts ESAPI has asked for in this process, and how many were made for it:
    /// `made` stays at 1 while the shared context is in place.
    package static var counts: (requested: UInt64, made: UInt64) {
        let counts = cesapi_crypto_context_counts()
        return (counts.requestsFromESAPI, counts.contextsMade)
    }
}

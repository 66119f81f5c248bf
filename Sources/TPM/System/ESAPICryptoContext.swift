internal import CESAPICryptoContext

/// The OpenSSL library context ESAPI's crypto backend uses: one, made the first time ESAPI asks,
/// instead of a new one for each hash and HMAC (CESAPICryptoContext's header says how and why).
package enum ESAPICryptoContext {
    /// Points libtss2-esys at the shared context, once per process; every ``Engine`` calls it
    /// before using ESAPI. False when this libtss2-esys does not import the two functions, or
    /// on an architecture other than x86_64 and arm64 (ESAPI then runs as it was built, only slower).
    @discardableResult
    package static func install() -> Bool {
        cesapi_crypto_context_install()
    }

    /// How many contexts ESAPI has asked for in this process, and how many were made for it:
    /// `made` stays at 1 while the shared context is in place.
    package static var counts: (requested: UInt64, made: UInt64) {
        let counts = cesapi_crypto_context_counts()
        return (counts.requestsFromESAPI, counts.contextsMade)
    }
}

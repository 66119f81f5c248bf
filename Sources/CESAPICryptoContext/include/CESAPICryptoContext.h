#ifndef CESAPI_CRYPTO_CONTEXT_H
#define CESAPI_CRYPTO_CONTEXT_H

/*
 * One OpenSSL library context for ESAPI's crypto backend, instead of one per hash.
 *
 * tpm2-tss's OpenSSL backend (esys_crypto_ossl.c, 3.x and 4.x) calls OSSL_LIB_CTX_new() for every
 * hash and HMAC it computes and frees the context afterwards, so that a TPM2 provider loaded into
 * OpenSSL's global context is never used for ESAPI's own crypto. Each new context loads the
 * default provider again, rebuilds OpenSSL's name map and seeds a new DRBG: about 0.45 ms of CPU,
 * 18 times in one CLI lookup, half of its CPU time (docs/PERFORMANCE.md).
 *
 * cesapi_crypto_context_install() points libtss2-esys's own import slots (its GOT entries) for
 * OSSL_LIB_CTX_new and OSSL_LIB_CTX_free at functions that hand out one private context, made
 * once with libcrypto's OSSL_LIB_CTX_new and never freed. It is still not OpenSSL's global
 * context, so ESAPI's reason for a context of its own holds. Nothing else changes: libcrypto,
 * and every other library's calls to it, are untouched, and no symbol is interposed.
 *
 * tpm2-tss 4.0 added Esys_SetCryptoCallbacks, the supported way to give ESAPI its crypto. Where it
 * is linked (the library description says so), callbacks over one context of ours should replace
 * this patch; Debian 12's 3.2.1 lacks them, so the patch stays for 3.x.
 *
 * TPM_KEYCHAIN_ESYS_SHARED_CONTEXT=0 in the environment leaves ESAPI as it was built.
 */

#include <stdbool.h>
#include <stdint.h>

/* Why ESAPI does or does not share one context; fixed once installation has run. */
typedef enum {
    CESAPICryptoContextNotAttempted = 0,
    CESAPICryptoContextInstalled,
    CESAPICryptoContextDisabledByEnvironment,
    CESAPICryptoContextLibraryNotFound,
    CESAPICryptoContextSymbolsMissing,
    CESAPICryptoContextUnsupportedArchitecture,
    CESAPICryptoContextUnsupportedVersion,
    CESAPICryptoContextSlotCheckFailed,
    CESAPICryptoContextProtectionFailed,
} CESAPICryptoContextStatus;

/* Patches libtss2-esys once per process; later calls return at once. Call before ESAPI is used.
 * True when every import slot of both functions now leads to the shared context; otherwise ESAPI
 * is left as it was, and cesapi_crypto_context_status() says why. */
bool cesapi_crypto_context_install(void);

CESAPICryptoContextStatus cesapi_crypto_context_status(void);

/* A short static sentence for a status, for a log line. */
const char *cesapi_crypto_context_status_description(CESAPICryptoContextStatus status);

/* The libtss2-esys installation looked at: SONAME, tpm2-tss major version and build ID, e.g.
 * "libtss2-esys.so.0 (tpm2-tss 3.x, build ID 5a75...)". Empty before installation or when none
 * was found. */
const char *cesapi_crypto_context_library(void);

/* How many contexts ESAPI asked for since installation, and how many were made for it (at most one). */
typedef struct {
    uint64_t requestsFromESAPI;
    uint64_t contextsMade;
} CESAPICryptoContextCounts;

CESAPICryptoContextCounts cesapi_crypto_context_counts(void);

#endif

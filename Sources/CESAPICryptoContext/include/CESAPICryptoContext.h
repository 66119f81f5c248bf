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
 * is linked, nothing is patched: cesapi_crypto_callbacks_set() gives each ESAPI context callbacks
 * over one context of ours (ESAPICryptoCallbacks.c). The patch is for 3.x (Debian 12's 3.2.1),
 * which lacks them.
 *
 * TPM_KEYCHAIN_ESYS_SHARED_CONTEXT=0 in the environment leaves ESAPI as it was built.
 */

#include <stdbool.h>
#include <stdint.h>

/* Why ESAPI does or does not share one context; fixed once installation has run. */
typedef enum {
    CESAPICryptoContextNotAttempted = 0,
    CESAPICryptoContextInstalled,
    /* tpm2-tss 4.x: each ESAPI context gets callbacks over one context (cesapi_crypto_callbacks_set). */
    CESAPICryptoContextCallbacks,
    CESAPICryptoContextDisabledByEnvironment,
    CESAPICryptoContextLibraryNotFound,
    CESAPICryptoContextSymbolsMissing,
    CESAPICryptoContextUnsupportedArchitecture,
    CESAPICryptoContextUnsupportedVersion,
    CESAPICryptoContextSlotCheckFailed,
    CESAPICryptoContextProtectionFailed,
} CESAPICryptoContextStatus;

/* Patches libtss2-esys 3.x once per process, or finds 4.x's Esys_SetCryptoCallbacks; later calls
 * return at once. Call before ESAPI is used. True when every import slot of both functions now
 * leads to the shared context, or when callbacks will be set; otherwise ESAPI is left as it was,
 * and cesapi_crypto_context_status() says why. */
bool cesapi_crypto_context_install(void);

/* With status CESAPICryptoContextCallbacks, gives one ESAPI context (an ESYS_CONTEXT *) the
 * callbacks; otherwise does nothing. Returns Esys_SetCryptoCallbacks's TSS2_RC (0: set); after a
 * failure the context has its built-in backend back. */
uint32_t cesapi_crypto_callbacks_set(void *esysContext);

/* The callbacks, in the layout of tpm2-tss 4.x's ESYS_CRYPTO_CALLBACKS: seventeen pointers, in
 * order rsa_pk_encrypt, hash_start, hash_update, hash_finish, hash_abort, hmac_start,
 * hmac_update, hmac_finish, hmac_abort, get_random2b, get_ecdh_point, aes_encrypt, aes_decrypt,
 * then sm4_encrypt, sm4_decrypt, init and userdata, all NULL (which also makes it 4.0's layout,
 * whose table ends with init and userdata after aes_decrypt). NULL when OpenSSL could not give
 * them their algorithms. For tests, which call them directly. */
const void *cesapi_crypto_callbacks(void);

CESAPICryptoContextStatus cesapi_crypto_context_status(void);

/* For a process of this project's own (the CLI, the git helper), whose only OpenSSL user is
 * ESAPI through the private context above: tells libcrypto, before anything else has used it,
 * not to build its legacy cipher and digest name tables and not to read openssl.cnf for its
 * global context. Each new library context copies the legacy tables into its name map on first
 * use; providers name their algorithms themselves, so a context fetches the same algorithms
 * without them. Never call it in a library: a host program's EVP_get_cipherbyname needs the
 * tables, and its global context its configuration. False when libcrypto had already started or
 * refused. */
bool cesapi_openssl_start_lean(void);

/* A short static sentence for a status, for a log line. */
const char *cesapi_crypto_context_status_description(CESAPICryptoContextStatus status);

/* The libtss2-esys installation looked at: SONAME, tpm2-tss major version and build ID, e.g.
 * "libtss2-esys.so.0 (tpm2-tss 3.x, build ID 5a75...)". Empty before installation or when none
 * was found. */
const char *cesapi_crypto_context_library(void);

/* How many contexts ESAPI asked for since installation, and how many were made for it (at most
 * one); with callbacks (4.x), how many hashes and HMACs ESAPI started through them, and the one
 * context they use. */
typedef struct {
    uint64_t requestsFromESAPI;
    uint64_t contextsMade;
} CESAPICryptoContextCounts;

CESAPICryptoContextCounts cesapi_crypto_context_counts(void);

#endif

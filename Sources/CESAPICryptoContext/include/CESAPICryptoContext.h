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
 */

#include <stdbool.h>
#include <stdint.h>

/* Patches libtss2-esys once per process; later calls return at once. Call before ESAPI is used.
 * Returns true when both import slots were found and now lead to the shared context; false leaves
 * ESAPI as it was (a libtss2-esys that does not import them, one not loaded as a shared library,
 * or an architecture other than x86_64 and arm64). */
bool cesapi_crypto_context_install(void);

/* How many contexts ESAPI asked for since installation, and how many were made for it (at most one). */
typedef struct {
    uint64_t requestsFromESAPI;
    uint64_t contextsMade;
} CESAPICryptoContextCounts;

CESAPICryptoContextCounts cesapi_crypto_context_counts(void);

#endif

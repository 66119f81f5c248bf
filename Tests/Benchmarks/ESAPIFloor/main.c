// The floor TPMKeychain's TPM layer is measured against: the fewest ESAPI calls that unseal a
// PolicyAuthValue-sealed key in a salted session with response encryption, written directly in C,
// with no locking, no stale-handle sweep and no storage-key name check.
//
//   cold: TctiLdr_Initialize, Esys_Initialize, CreatePrimary (TCG ECC SRK), StartAuthSession
//         (salted), PolicyAuthValue, Load, Unseal, FlushContext x2, Esys_Finalize
//   warm: StartAuthSession (salted), PolicyAuthValue, Load, Unseal, FlushContext (object)
//
//   record (a key record's first unseal in a fresh connection, as a protected get does):
//         TctiLdr_Initialize, Esys_Initialize, ContextLoad (the storage key's saved context),
//         Load, StartAuthSession (salted), PolicyCommandCode(Unseal), Unseal, FlushContext x2,
//         Esys_Finalize; the object is sealed under PolicyCommandCode(Unseal) with noDA.
//
//   sign (a signature with a P-256 key made in the TPM, in a fresh connection):
//         TctiLdr_Initialize, Esys_Initialize, ContextLoad (the storage key's saved context),
//         Load, StartAuthSession (salted HMAC), Sign (ECDSA, SHA-256 digest), FlushContext x3,
//         Esys_Finalize; the key has userWithAuth, an empty authValue and noDA.
//
// Usage: esapi-floor TCTI ITERATIONS          (prints median and p90 in milliseconds)
//        esapi-floor TCTI ITERATIONS record   (prints one "sample <ms>" line per iteration)
//        esapi-floor TCTI ITERATIONS sign     (the same)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <tss2/tss2_esys.h>
#include <tss2/tss2_tctildr.h>

#include "CESAPICryptoContext.h"

#define CHECK(call) do { TSS2_RC rc_ = (call); if (rc_ != TSS2_RC_SUCCESS) { \
    fprintf(stderr, "%s failed: 0x%x\n", #call, rc_); exit(1); } } while (0)

static const TPM2B_PUBLIC srk_template = {
    .publicArea = {
        .type = TPM2_ALG_ECC, .nameAlg = TPM2_ALG_SHA256,
        .objectAttributes = TPMA_OBJECT_FIXEDTPM | TPMA_OBJECT_FIXEDPARENT | TPMA_OBJECT_SENSITIVEDATAORIGIN |
                            TPMA_OBJECT_USERWITHAUTH | TPMA_OBJECT_NODA | TPMA_OBJECT_RESTRICTED | TPMA_OBJECT_DECRYPT,
        .parameters.eccDetail = {
            .symmetric = { .algorithm = TPM2_ALG_AES, .keyBits.aes = 128, .mode.aes = TPM2_ALG_CFB },
            .scheme.scheme = TPM2_ALG_NULL, .curveID = TPM2_ECC_NIST_P256, .kdf.scheme = TPM2_ALG_NULL },
        .unique.ecc = { .x.size = 32, .y.size = 32 } } };

/* PolicyAuthValue from the zero digest. */
static const uint8_t policy_auth_value[32] = {
    0x8f, 0xcd, 0x21, 0x69, 0xab, 0x92, 0x69, 0x4e, 0x0c, 0x63, 0x3f, 0x1a, 0xb7, 0x72, 0x84, 0x2b,
    0x82, 0x41, 0xbb, 0xc2, 0x02, 0x88, 0x98, 0x1f, 0xc7, 0xac, 0x1e, 0xdd, 0xc1, 0xfd, 0xdb, 0x0e };

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int compare(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static ESYS_CONTEXT *connect_tpm(const char *tcti, TSS2_TCTI_CONTEXT **tcti_context) {
    ESYS_CONTEXT *esys = NULL;
    CHECK(Tss2_TctiLdr_Initialize(tcti, tcti_context));
    CHECK(Esys_Initialize(&esys, *tcti_context, NULL));
    return esys;
}

static void disconnect(ESYS_CONTEXT *esys, TSS2_TCTI_CONTEXT *tcti_context) {
    Esys_Finalize(&esys);
    Tss2_TctiLdr_Finalize(&tcti_context);
}

static ESYS_TR create_srk(ESYS_CONTEXT *esys) {
    TPM2B_SENSITIVE_CREATE sensitive = { 0 };
    TPM2B_DATA outside = { 0 };
    TPML_PCR_SELECTION pcrs = { 0 };
    ESYS_TR srk;
    TPM2B_PUBLIC *out_public; TPM2B_CREATION_DATA *data; TPM2B_DIGEST *hash; TPMT_TK_CREATION *ticket;
    CHECK(Esys_CreatePrimary(esys, ESYS_TR_RH_OWNER, ESYS_TR_PASSWORD, ESYS_TR_NONE, ESYS_TR_NONE, &sensitive,
                             &srk_template, &outside, &pcrs, &srk, &out_public, &data, &hash, &ticket));
    Esys_Free(out_public); Esys_Free(data); Esys_Free(hash); Esys_Free(ticket);
    return srk;
}

static ESYS_TR salted_session(ESYS_CONTEXT *esys, ESYS_TR srk, TPM2_SE type) {
    TPMT_SYM_DEF symmetric = { .algorithm = TPM2_ALG_AES, .keyBits.aes = 128, .mode.aes = TPM2_ALG_CFB };
    ESYS_TR session;
    CHECK(Esys_StartAuthSession(esys, srk, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE, NULL, type,
                                &symmetric, TPM2_ALG_SHA256, &session));
    return session;
}

static void seal(ESYS_CONTEXT *esys, ESYS_TR srk, TPM2B_PUBLIC **pub, TPM2B_PRIVATE **priv) {
    TPM2B_SENSITIVE_CREATE sensitive = { .sensitive.data.size = 32 };
    memset(sensitive.sensitive.data.buffer, 0x42, 32);
    TPM2B_PUBLIC template = { .publicArea = {
        .type = TPM2_ALG_KEYEDHASH, .nameAlg = TPM2_ALG_SHA256,
        .objectAttributes = TPMA_OBJECT_FIXEDTPM | TPMA_OBJECT_FIXEDPARENT | TPMA_OBJECT_ADMINWITHPOLICY,
        .authPolicy.size = 32, .parameters.keyedHashDetail.scheme.scheme = TPM2_ALG_NULL } };
    memcpy(template.publicArea.authPolicy.buffer, policy_auth_value, 32);
    TPM2B_DATA outside = { 0 };
    TPML_PCR_SELECTION pcrs = { 0 };
    TPM2B_CREATION_DATA *data; TPM2B_DIGEST *hash; TPMT_TK_CREATION *ticket;
    ESYS_TR session = salted_session(esys, srk, TPM2_SE_HMAC);
    CHECK(Esys_TRSess_SetAttributes(esys, session, TPMA_SESSION_DECRYPT, 0xff));
    CHECK(Esys_Create(esys, srk, session, ESYS_TR_NONE, ESYS_TR_NONE, &sensitive, &template, &outside, &pcrs,
                      priv, pub, &data, &hash, &ticket));
    Esys_Free(data); Esys_Free(hash); Esys_Free(ticket);
}

static void unseal(ESYS_CONTEXT *esys, ESYS_TR srk, const TPM2B_PUBLIC *pub, const TPM2B_PRIVATE *priv) {
    ESYS_TR object, session;
    TPM2B_SENSITIVE_DATA *out;
    CHECK(Esys_Load(esys, srk, ESYS_TR_PASSWORD, ESYS_TR_NONE, ESYS_TR_NONE, priv, pub, &object));
    session = salted_session(esys, srk, TPM2_SE_POLICY);
    CHECK(Esys_PolicyAuthValue(esys, session, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE));
    CHECK(Esys_TRSess_SetAttributes(esys, session, TPMA_SESSION_ENCRYPT, 0xff));
    CHECK(Esys_Unseal(esys, object, session, ESYS_TR_NONE, ESYS_TR_NONE, &out));
    if (out->size != 32 || out->buffer[0] != 0x42) { fprintf(stderr, "wrong secret\n"); exit(1); }
    Esys_Free(out);
    CHECK(Esys_FlushContext(esys, object));
}

/* PolicyCommandCode(TPM2_CC_Unseal) from the zero digest, computed by the TPM in a trial session. */
static void unseal_only_digest(ESYS_CONTEXT *esys, TPM2B_DIGEST *digest) {
    TPMT_SYM_DEF symmetric = { .algorithm = TPM2_ALG_NULL };
    ESYS_TR trial;
    TPM2B_DIGEST *out;
    CHECK(Esys_StartAuthSession(esys, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE, NULL,
                                TPM2_SE_TRIAL, &symmetric, TPM2_ALG_SHA256, &trial));
    CHECK(Esys_PolicyCommandCode(esys, trial, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE, TPM2_CC_Unseal));
    CHECK(Esys_PolicyGetDigest(esys, trial, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE, &out));
    *digest = *out;
    Esys_Free(out);
    CHECK(Esys_FlushContext(esys, trial));
}

static int record_mode(const char *tcti, int iterations) {
    TSS2_TCTI_CONTEXT *tcti_context;
    ESYS_CONTEXT *esys = connect_tpm(tcti, &tcti_context);
    ESYS_TR srk = create_srk(esys);
    TPMS_CONTEXT *saved;
    TPM2B_DIGEST policy;
    unseal_only_digest(esys, &policy);
    TPM2B_SENSITIVE_CREATE sensitive = { .sensitive.data.size = 32 };
    memset(sensitive.sensitive.data.buffer, 0x42, 32);
    TPM2B_PUBLIC template = { .publicArea = {
        .type = TPM2_ALG_KEYEDHASH, .nameAlg = TPM2_ALG_SHA256,
        .objectAttributes = TPMA_OBJECT_FIXEDTPM | TPMA_OBJECT_FIXEDPARENT | TPMA_OBJECT_ADMINWITHPOLICY | TPMA_OBJECT_NODA,
        .authPolicy = policy, .parameters.keyedHashDetail.scheme.scheme = TPM2_ALG_NULL } };
    TPM2B_DATA outside = { 0 };
    TPML_PCR_SELECTION pcrs = { 0 };
    TPM2B_PUBLIC *pub; TPM2B_PRIVATE *priv;
    TPM2B_CREATION_DATA *data; TPM2B_DIGEST *hash; TPMT_TK_CREATION *ticket;
    ESYS_TR session = salted_session(esys, srk, TPM2_SE_HMAC);
    CHECK(Esys_TRSess_SetAttributes(esys, session, TPMA_SESSION_DECRYPT, 0xff));
    CHECK(Esys_Create(esys, srk, session, ESYS_TR_NONE, ESYS_TR_NONE, &sensitive, &template, &outside, &pcrs,
                      &priv, &pub, &data, &hash, &ticket));
    Esys_Free(data); Esys_Free(hash); Esys_Free(ticket);
    /* The session ended with the command (continueSession clear). */
    CHECK(Esys_ContextSave(esys, srk, &saved));
    CHECK(Esys_FlushContext(esys, srk));
    disconnect(esys, tcti_context);
    for (int i = 0; i <= iterations; i++) {
        double start = now_ms();
        esys = connect_tpm(tcti, &tcti_context);
        CHECK(Esys_ContextLoad(esys, saved, &srk));
        ESYS_TR object;
        CHECK(Esys_Load(esys, srk, ESYS_TR_PASSWORD, ESYS_TR_NONE, ESYS_TR_NONE, priv, pub, &object));
        session = salted_session(esys, srk, TPM2_SE_POLICY);
        CHECK(Esys_PolicyCommandCode(esys, session, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE, TPM2_CC_Unseal));
        CHECK(Esys_TRSess_SetAttributes(esys, session, TPMA_SESSION_ENCRYPT, 0xff));
        TPM2B_SENSITIVE_DATA *out;
        CHECK(Esys_Unseal(esys, object, session, ESYS_TR_NONE, ESYS_TR_NONE, &out));
        if (out->size != 32 || out->buffer[0] != 0x42) { fprintf(stderr, "wrong secret\n"); exit(1); }
        Esys_Free(out);
        CHECK(Esys_FlushContext(esys, object));
        CHECK(Esys_FlushContext(esys, srk));
        disconnect(esys, tcti_context);
        if (i > 0) printf("sample %.4f\n", now_ms() - start);   /* the first run is the warm-up */
    }
    Esys_Free(saved); Esys_Free(pub); Esys_Free(priv);
    return 0;
}

static int sign_mode(const char *tcti, int iterations) {
    TSS2_TCTI_CONTEXT *tcti_context;
    ESYS_CONTEXT *esys = connect_tpm(tcti, &tcti_context);
    ESYS_TR srk = create_srk(esys);
    TPMS_CONTEXT *saved;
    TPM2B_SENSITIVE_CREATE sensitive = { 0 };
    TPM2B_PUBLIC template = { .publicArea = {
        .type = TPM2_ALG_ECC, .nameAlg = TPM2_ALG_SHA256,
        .objectAttributes = TPMA_OBJECT_FIXEDTPM | TPMA_OBJECT_FIXEDPARENT | TPMA_OBJECT_SENSITIVEDATAORIGIN |
                            TPMA_OBJECT_USERWITHAUTH | TPMA_OBJECT_NODA | TPMA_OBJECT_SIGN_ENCRYPT,
        .parameters.eccDetail = {
            .symmetric.algorithm = TPM2_ALG_NULL, .scheme.scheme = TPM2_ALG_NULL,
            .curveID = TPM2_ECC_NIST_P256, .kdf.scheme = TPM2_ALG_NULL } } };
    TPM2B_DATA outside = { 0 };
    TPML_PCR_SELECTION pcrs = { 0 };
    TPM2B_PUBLIC *pub; TPM2B_PRIVATE *priv;
    TPM2B_CREATION_DATA *data; TPM2B_DIGEST *hash; TPMT_TK_CREATION *ticket;
    CHECK(Esys_Create(esys, srk, ESYS_TR_PASSWORD, ESYS_TR_NONE, ESYS_TR_NONE, &sensitive, &template, &outside,
                      &pcrs, &priv, &pub, &data, &hash, &ticket));
    Esys_Free(data); Esys_Free(hash); Esys_Free(ticket);
    CHECK(Esys_ContextSave(esys, srk, &saved));
    CHECK(Esys_FlushContext(esys, srk));
    disconnect(esys, tcti_context);
    TPM2B_DIGEST digest = { .size = 32 };
    memset(digest.buffer, 0x5a, 32);
    TPMT_SIG_SCHEME scheme = { .scheme = TPM2_ALG_ECDSA, .details.ecdsa.hashAlg = TPM2_ALG_SHA256 };
    TPMT_TK_HASHCHECK validation = { .tag = TPM2_ST_HASHCHECK, .hierarchy = TPM2_RH_NULL };
    for (int i = 0; i <= iterations; i++) {
        double start = now_ms();
        esys = connect_tpm(tcti, &tcti_context);
        CHECK(Esys_ContextLoad(esys, saved, &srk));
        ESYS_TR key;
        CHECK(Esys_Load(esys, srk, ESYS_TR_PASSWORD, ESYS_TR_NONE, ESYS_TR_NONE, priv, pub, &key));
        ESYS_TR session = salted_session(esys, srk, TPM2_SE_HMAC);
        CHECK(Esys_TRSess_SetAttributes(esys, session, TPMA_SESSION_CONTINUESESSION, 0xff));
        TPMT_SIGNATURE *signature;
        CHECK(Esys_Sign(esys, key, session, ESYS_TR_NONE, ESYS_TR_NONE, &digest, &scheme, &validation, &signature));
        if (signature->sigAlg != TPM2_ALG_ECDSA) { fprintf(stderr, "wrong signature\n"); exit(1); }
        Esys_Free(signature);
        CHECK(Esys_FlushContext(esys, key));
        CHECK(Esys_FlushContext(esys, session));
        CHECK(Esys_FlushContext(esys, srk));
        disconnect(esys, tcti_context);
        if (i > 0) printf("sample %.4f\n", now_ms() - start);   /* the first run is the warm-up */
    }
    Esys_Free(saved); Esys_Free(pub); Esys_Free(priv);
    return 0;
}

static void report(const char *what, double *samples, int count) {
    qsort(samples, count, sizeof(double), compare);
    printf("%s: median %.3f ms, p90 %.3f ms (n=%d)\n", what, samples[count / 2], samples[count * 9 / 10], count);
}

int main(int argc, char **argv) {
    if (argc != 3 && !(argc == 4 && (strcmp(argv[3], "record") == 0 || strcmp(argv[3], "sign") == 0))) {
        fprintf(stderr, "usage: esapi-floor TCTI ITERATIONS [record|sign]\n");
        return 64;
    }
    setenv("TSS2_LOG", "all+NONE", 0);
    /* The same shared OpenSSL context the TPM layer gives ESAPI, so that the floor measures the
     * round trips and not tpm2-tss's context-per-hash cost that ours no longer pays. */
    if (!cesapi_crypto_context_install()) fprintf(stderr, "esapi-floor: ESAPI's OpenSSL contexts could not be shared\n");
    const char *tcti = argv[1];
    int iterations = atoi(argv[2]);
    if (argc == 4) return strcmp(argv[3], "sign") == 0 ? sign_mode(tcti, iterations) : record_mode(tcti, iterations);
    double *samples = calloc(iterations, sizeof(double));
    TSS2_TCTI_CONTEXT *tcti_context;
    ESYS_CONTEXT *esys = connect_tpm(tcti, &tcti_context);
    ESYS_TR srk = create_srk(esys);
    TPM2B_PUBLIC *pub; TPM2B_PRIVATE *priv;
    seal(esys, srk, &pub, &priv);
    unseal(esys, srk, pub, priv);  /* warm-up */
    for (int i = 0; i < iterations; i++) {
        double start = now_ms();
        unseal(esys, srk, pub, priv);
        samples[i] = now_ms() - start;
    }
    report("floor warm unseal", samples, iterations);
    Esys_FlushContext(esys, srk);
    disconnect(esys, tcti_context);

    for (int i = 0; i < iterations; i++) {
        double start = now_ms();
        esys = connect_tpm(tcti, &tcti_context);
        srk = create_srk(esys);
        unseal(esys, srk, pub, priv);
        CHECK(Esys_FlushContext(esys, srk));
        disconnect(esys, tcti_context);
        samples[i] = now_ms() - start;
    }
    report("floor cold open + unseal", samples, iterations);
    Esys_Free(pub); Esys_Free(priv); free(samples);
    return 0;
}

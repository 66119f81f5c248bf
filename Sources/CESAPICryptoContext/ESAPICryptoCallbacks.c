/*
 * ESAPI's crypto (tpm2-tss 4.0 and later: Esys_SetCryptoCallbacks) over one OpenSSL library
 * context of ours, with the algorithms fetched from it once: what the GOT patch in
 * CESAPICryptoContext.c achieves for 3.x, through the supported interface.
 *
 * What each callback must do is tpm2-tss's contract (src/tss2-esys/esys_crypto.c and
 * esys_crypto_ossl.c in 4.1.3): return TSS2_RC_SUCCESS or an ESAPI error code, which ESAPI passes
 * on; hash and HMAC contexts are allocated by start and freed by finish or abort (ESAPI calls an
 * abort after any failure, also on a context a finish already freed, and sometimes the abort of
 * the other kind: both aborts free either kind and accept NULL).
 */
#include "CESAPICryptoContext.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/rand.h>
#include <openssl/rsa.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <tss2/tss2_common.h>
#include <tss2/tss2_tpm2_types.h>

/* tpm2-tss 4.x's ESYS_CRYPTO_CALLBACKS, with our names and the blob type of our own. */
typedef struct CESAPICryptoBlob Blob;
typedef struct {
    TSS2_RC (*rsaEncrypt)(TPM2B_PUBLIC *, size_t, BYTE *, size_t, BYTE *, size_t *, const char *, void *);
    TSS2_RC (*hashStart)(Blob **, TPM2_ALG_ID, void *);
    TSS2_RC (*hashUpdate)(Blob *, const uint8_t *, size_t, void *);
    TSS2_RC (*hashFinish)(Blob **, uint8_t *, size_t *, void *);
    void (*hashAbort)(Blob **, void *);
    TSS2_RC (*hmacStart)(Blob **, TPM2_ALG_ID, const uint8_t *, size_t, void *);
    TSS2_RC (*hmacUpdate)(Blob *, const uint8_t *, size_t, void *);
    TSS2_RC (*hmacFinish)(Blob **, uint8_t *, size_t *, void *);
    void (*hmacAbort)(Blob **, void *);
    TSS2_RC (*randomBytes)(TPM2B_NONCE *, size_t, void *);
    TSS2_RC (*eccPoint)(TPM2B_PUBLIC *, size_t, TPM2B_ECC_PARAMETER *, TPMS_ECC_POINT *, BYTE *, size_t *, void *);
    TSS2_RC (*aesEncrypt)(uint8_t *, TPM2_ALG_ID, TPMI_AES_KEY_BITS, TPM2_ALG_ID, uint8_t *, size_t, uint8_t *, void *);
    TSS2_RC (*aesDecrypt)(uint8_t *, TPM2_ALG_ID, TPMI_AES_KEY_BITS, TPM2_ALG_ID, uint8_t *, size_t, uint8_t *, void *);
    void *sm4Encrypt;
    void *sm4Decrypt;
    void *init;
    void *userdata;
} CESAPICryptoCallbacks;

/* Private: not OpenSSL's global context, so a TPM2 provider loaded there is never recursed into
 * (tpm2-tss's own reason for a context of its own). Made once, never freed. */
static OSSL_LIB_CTX *context;
static EVP_MD *digests[5];
static EVP_MAC *hmac;
static EVP_CIPHER *aesCFB[3];
static pthread_once_t prepared = PTHREAD_ONCE_INIT;
/* Hashes and HMACs started through the callbacks, and library contexts made for them (at most 1). */
static _Atomic uint64_t uses;
static _Atomic uint64_t contextsMade;

void cesapiCallbackCounts(uint64_t *started, uint64_t *made) {
    *started = atomic_load(&uses);
    *made = atomic_load(&contextsMade);
}

static const char *digestNames[5] = {"SHA1", "SHA256", "SHA384", "SHA512", "SM3"};
static const TPM2_ALG_ID digestAlgorithms[5] = {TPM2_ALG_SHA1, TPM2_ALG_SHA256, TPM2_ALG_SHA384, TPM2_ALG_SHA512, TPM2_ALG_SM3_256};

static void prepare(void) {
    context = OSSL_LIB_CTX_new();
    if (context == NULL) return;
    atomic_fetch_add(&contextsMade, 1);
    // An algorithm this libcrypto lacks (SM3 where it was left out) stays NULL: NOT_IMPLEMENTED.
    for (int i = 0; i < 5; i++) digests[i] = EVP_MD_fetch(context, digestNames[i], NULL);
    hmac = EVP_MAC_fetch(context, "HMAC", NULL);
    aesCFB[0] = EVP_CIPHER_fetch(context, "AES-128-CFB", NULL);
    aesCFB[1] = EVP_CIPHER_fetch(context, "AES-192-CFB", NULL);
    aesCFB[2] = EVP_CIPHER_fetch(context, "AES-256-CFB", NULL);
}

static bool ready(void) {
    pthread_once(&prepared, prepare);
    return context != NULL && hmac != NULL && digests[1] != NULL && aesCFB[0] != NULL && aesCFB[2] != NULL;
}

static int digestIndex(TPM2_ALG_ID algorithm) {
    for (int i = 0; i < 5; i++) {
        if (digestAlgorithms[i] == algorithm) return digests[i] != NULL ? i : -1;
    }
    return -1;
}

/* Hash and HMAC state, the same shape for both, so either abort frees either. */
struct CESAPICryptoBlob {
    EVP_MD_CTX *digest;
    EVP_MAC_CTX *mac;
    size_t size;
};

static void freeBlob(Blob **blob) {
    if (blob == NULL || *blob == NULL) return;
    EVP_MD_CTX_free((*blob)->digest);
    EVP_MAC_CTX_free((*blob)->mac);
    free(*blob);
    *blob = NULL;
}

/* A new, counted blob for `algorithm`'s digest (its index in `digests`), or an error code. */
static TSS2_RC startBlob(Blob **blob, TPM2_ALG_ID algorithm, int *index) {
    if (blob == NULL) return TSS2_ESYS_RC_BAD_REFERENCE;
    if (!ready()) return TSS2_ESYS_RC_GENERAL_FAILURE;
    *index = digestIndex(algorithm);
    if (*index < 0) return TSS2_ESYS_RC_NOT_IMPLEMENTED;
    atomic_fetch_add(&uses, 1);
    *blob = calloc(1, sizeof(Blob));
    if (*blob == NULL) return TSS2_ESYS_RC_MEMORY;
    (*blob)->size = (size_t)EVP_MD_get_size(digests[*index]);
    return TSS2_RC_SUCCESS;
}

/* A blob ready for a finish into `size` bytes: too small a buffer leaves it for the abort ESAPI
 * calls next. */
static TSS2_RC checkFinish(Blob **blob, const uint8_t *buffer, const size_t *size, bool isMAC) {
    if (blob == NULL || *blob == NULL || buffer == NULL || size == NULL) return TSS2_ESYS_RC_BAD_REFERENCE;
    if (isMAC ? (*blob)->mac == NULL : (*blob)->digest == NULL) return TSS2_ESYS_RC_BAD_REFERENCE;
    return *size < (*blob)->size ? TSS2_ESYS_RC_BAD_SIZE : TSS2_RC_SUCCESS;
}

/* Frees the blob after a finish, which ran whether or not it succeeded. */
static TSS2_RC endFinish(Blob **blob, bool ok, size_t written, size_t *size) {
    freeBlob(blob);
    if (!ok) return TSS2_ESYS_RC_GENERAL_FAILURE;
    *size = written;
    return TSS2_RC_SUCCESS;
}

static TSS2_RC hashStart(Blob **blob, TPM2_ALG_ID algorithm, void *userdata) {
    (void)userdata;
    int index = 0;
    TSS2_RC rc = startBlob(blob, algorithm, &index);
    if (rc != TSS2_RC_SUCCESS) return rc;
    (*blob)->digest = EVP_MD_CTX_new();
    if ((*blob)->digest == NULL || EVP_DigestInit_ex2((*blob)->digest, digests[index], NULL) != 1) {
        freeBlob(blob);
        return TSS2_ESYS_RC_GENERAL_FAILURE;
    }
    return TSS2_RC_SUCCESS;
}

static TSS2_RC hashUpdate(Blob *blob, const uint8_t *buffer, size_t size, void *userdata) {
    (void)userdata;
    if (blob == NULL || blob->digest == NULL || (buffer == NULL && size > 0)) return TSS2_ESYS_RC_BAD_REFERENCE;
    return EVP_DigestUpdate(blob->digest, buffer, size) == 1 ? TSS2_RC_SUCCESS : TSS2_ESYS_RC_GENERAL_FAILURE;
}

static TSS2_RC hashFinish(Blob **blob, uint8_t *buffer, size_t *size, void *userdata) {
    (void)userdata;
    TSS2_RC rc = checkFinish(blob, buffer, size, false);
    if (rc != TSS2_RC_SUCCESS) return rc;
    unsigned int written = 0;
    bool ok = EVP_DigestFinal_ex((*blob)->digest, buffer, &written) == 1;
    return endFinish(blob, ok, written, size);
}

static void abortBlob(Blob **blob, void *userdata) {
    (void)userdata;
    freeBlob(blob);
}

static TSS2_RC hmacStart(Blob **blob, TPM2_ALG_ID algorithm, const uint8_t *key, size_t keySize, void *userdata) {
    (void)userdata;
    if (key == NULL && keySize > 0) return TSS2_ESYS_RC_BAD_REFERENCE;
    int index = 0;
    TSS2_RC rc = startBlob(blob, algorithm, &index);
    if (rc != TSS2_RC_SUCCESS) return rc;
    OSSL_PARAM parameters[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)digestNames[index], 0),
        OSSL_PARAM_construct_end(),
    };
    // Sessions without a session key or authValue have an empty HMAC key: a NULL key would mean
    // "keep the previous one" to EVP_MAC_init, so an empty one is passed as a pointer and 0.
    static const uint8_t emptyKey[1] = {0};
    (*blob)->mac = EVP_MAC_CTX_new(hmac);
    if ((*blob)->mac == NULL || EVP_MAC_init((*blob)->mac, key != NULL ? key : emptyKey, keySize, parameters) != 1) {
        freeBlob(blob);
        return TSS2_ESYS_RC_GENERAL_FAILURE;
    }
    return TSS2_RC_SUCCESS;
}

static TSS2_RC hmacUpdate(Blob *blob, const uint8_t *buffer, size_t size, void *userdata) {
    (void)userdata;
    if (blob == NULL || blob->mac == NULL || (buffer == NULL && size > 0)) return TSS2_ESYS_RC_BAD_REFERENCE;
    return EVP_MAC_update(blob->mac, buffer, size) == 1 ? TSS2_RC_SUCCESS : TSS2_ESYS_RC_GENERAL_FAILURE;
}

static TSS2_RC hmacFinish(Blob **blob, uint8_t *buffer, size_t *size, void *userdata) {
    (void)userdata;
    TSS2_RC rc = checkFinish(blob, buffer, size, true);
    if (rc != TSS2_RC_SUCCESS) return rc;
    size_t written = 0;
    bool ok = EVP_MAC_final((*blob)->mac, buffer, &written, *size) == 1;
    return endFinish(blob, ok, written, size);
}

static TSS2_RC randomBytes(TPM2B_NONCE *nonce, size_t count, void *userdata) {
    (void)userdata;
    if (nonce == NULL) return TSS2_ESYS_RC_BAD_REFERENCE;
    if (!ready()) return TSS2_ESYS_RC_GENERAL_FAILURE;
    // 0 asks for a whole buffer, as tpm2-tss's own backend reads it.
    size_t wanted = count == 0 ? sizeof(nonce->buffer) : count;
    if (wanted > sizeof(nonce->buffer)) return TSS2_ESYS_RC_BAD_VALUE;
    if (RAND_bytes_ex(context, nonce->buffer, wanted, 0) != 1) return TSS2_ESYS_RC_GENERAL_FAILURE;
    nonce->size = (UINT16)wanted;
    return TSS2_RC_SUCCESS;
}

/* Writes `value` big-endian into `size` bytes, zero-padded on the left. */
static bool writePadded(const BIGNUM *value, uint8_t *out, size_t size) {
    return value != NULL && BN_bn2binpad(value, out, (int)size) == (int)size;
}

static const char *curveName(TPMI_ECC_CURVE curve, size_t *size) {
    switch (curve) {
    case TPM2_ECC_NIST_P192: *size = 24; return "P-192";
    case TPM2_ECC_NIST_P224: *size = 28; return "P-224";
    case TPM2_ECC_NIST_P256: *size = 32; return "P-256";
    case TPM2_ECC_NIST_P384: *size = 48; return "P-384";
    case TPM2_ECC_NIST_P521: *size = 66; return "P-521";
    default: return NULL;
    }
}

/* The TPM key's point as an OpenSSL public key, or NULL. */
static EVP_PKEY *peerKey(const char *curve, size_t size, const TPMS_ECC_POINT *point) {
    if (point->x.size > size || point->y.size > size) return NULL;
    uint8_t encoded[1 + 2 * 66] = {0x04};
    memcpy(encoded + 1 + (size - point->x.size), point->x.buffer, point->x.size);
    memcpy(encoded + 1 + size + (size - point->y.size), point->y.buffer, point->y.size);
    OSSL_PARAM parameters[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME, (char *)curve, 0),
        OSSL_PARAM_construct_octet_string(OSSL_PKEY_PARAM_PUB_KEY, encoded, 1 + 2 * size),
        OSSL_PARAM_construct_end(),
    };
    EVP_PKEY *key = NULL;
    EVP_PKEY_CTX *maker = EVP_PKEY_CTX_new_from_name(context, "EC", NULL);
    if (maker == NULL || EVP_PKEY_fromdata_init(maker) != 1 || EVP_PKEY_fromdata(maker, &key, EVP_PKEY_PUBLIC_KEY, parameters) != 1) key = NULL;
    EVP_PKEY_CTX_free(maker);
    return key;
}

/* ECDH with an ephemeral key for a salted session: Z = x(d_e * Q_tpm), Q = the ephemeral public
 * point, and Q marshalled as a TPMS_ECC_POINT (two TPM2Bs) into `out`. */
static TSS2_RC eccPoint(TPM2B_PUBLIC *key, size_t maximumOut, TPM2B_ECC_PARAMETER *z, TPMS_ECC_POINT *q,
                        BYTE *out, size_t *outSize, void *userdata) {
    (void)userdata;
    if (key == NULL || z == NULL || q == NULL || out == NULL || outSize == NULL) return TSS2_ESYS_RC_BAD_REFERENCE;
    if (!ready()) return TSS2_ESYS_RC_GENERAL_FAILURE;
    size_t size = 0;
    const char *curve = curveName(key->publicArea.parameters.eccDetail.curveID, &size);
    if (curve == NULL) return TSS2_ESYS_RC_NOT_IMPLEMENTED;
    if (maximumOut < 4 + 2 * size) return TSS2_ESYS_RC_BAD_SIZE;

    TSS2_RC rc = TSS2_ESYS_RC_GENERAL_FAILURE;
    EVP_PKEY *ephemeral = EVP_PKEY_Q_keygen(context, NULL, "EC", curve);
    EVP_PKEY *peer = peerKey(curve, size, &key->publicArea.unique.ecc);
    EVP_PKEY_CTX *derivation = NULL;
    BIGNUM *x = NULL, *y = NULL;
    uint8_t shared[66];
    size_t sharedSize = sizeof(shared);
    if (ephemeral == NULL || peer == NULL) goto done;
    if (EVP_PKEY_get_bn_param(ephemeral, OSSL_PKEY_PARAM_EC_PUB_X, &x) != 1 ||
        EVP_PKEY_get_bn_param(ephemeral, OSSL_PKEY_PARAM_EC_PUB_Y, &y) != 1 ||
        !writePadded(x, q->x.buffer, size) || !writePadded(y, q->y.buffer, size)) goto done;
    q->x.size = q->y.size = (UINT16)size;
    derivation = EVP_PKEY_CTX_new_from_pkey(context, ephemeral, NULL);
    // validate_peer = 1: a point not on the curve is refused, not multiplied.
    if (derivation == NULL || EVP_PKEY_derive_init(derivation) != 1 || EVP_PKEY_derive_set_peer_ex(derivation, peer, 1) != 1 ||
        EVP_PKEY_derive(derivation, shared, &sharedSize) != 1 || sharedSize != size) goto done;
    memcpy(z->buffer, shared, size);
    z->size = (UINT16)size;
    size_t offset = 0;
    for (int half = 0; half < 2; half++) {
        const TPM2B_ECC_PARAMETER *coordinate = half == 0 ? &q->x : &q->y;
        out[offset++] = (BYTE)(coordinate->size >> 8);
        out[offset++] = (BYTE)(coordinate->size & 0xFF);
        memcpy(out + offset, coordinate->buffer, coordinate->size);
        offset += coordinate->size;
    }
    *outSize = offset;
    rc = TSS2_RC_SUCCESS;
done:
    OPENSSL_cleanse(shared, sizeof(shared));
    EVP_PKEY_CTX_free(derivation);
    EVP_PKEY_free(ephemeral);
    EVP_PKEY_free(peer);
    BN_free(x);
    BN_free(y);
    return rc;
}

static TSS2_RC aesCFBInPlace(bool encrypt, uint8_t *key, TPM2_ALG_ID algorithm, TPMI_AES_KEY_BITS bits, TPM2_ALG_ID mode,
                             uint8_t *buffer, size_t size, uint8_t *iv) {
    if (key == NULL || iv == NULL || (buffer == NULL && size > 0)) return TSS2_ESYS_RC_BAD_REFERENCE;
    if (algorithm != TPM2_ALG_AES || mode != TPM2_ALG_CFB) return TSS2_ESYS_RC_BAD_VALUE;
    if (!ready()) return TSS2_ESYS_RC_GENERAL_FAILURE;
    EVP_CIPHER *cipher = bits == 128 ? aesCFB[0] : bits == 192 ? aesCFB[1] : bits == 256 ? aesCFB[2] : NULL;
    if (cipher == NULL) return TSS2_ESYS_RC_NOT_IMPLEMENTED;
    if (size == 0) return TSS2_RC_SUCCESS;
    EVP_CIPHER_CTX *operation = EVP_CIPHER_CTX_new();
    int written = 0, finalWritten = 0;
    bool ok = operation != NULL && EVP_CipherInit_ex2(operation, cipher, key, iv, encrypt ? 1 : 0, NULL) == 1 &&
              EVP_CipherUpdate(operation, buffer, &written, buffer, (int)size) == 1 &&
              EVP_CipherFinal_ex(operation, buffer + written, &finalWritten) == 1 && (size_t)(written + finalWritten) == size;
    EVP_CIPHER_CTX_free(operation);
    return ok ? TSS2_RC_SUCCESS : TSS2_ESYS_RC_GENERAL_FAILURE;
}

static TSS2_RC aesEncrypt(uint8_t *key, TPM2_ALG_ID algorithm, TPMI_AES_KEY_BITS bits, TPM2_ALG_ID mode, uint8_t *buffer,
                          size_t size, uint8_t *iv, void *userdata) {
    (void)userdata;
    return aesCFBInPlace(true, key, algorithm, bits, mode, buffer, size, iv);
}

static TSS2_RC aesDecrypt(uint8_t *key, TPM2_ALG_ID algorithm, TPMI_AES_KEY_BITS bits, TPM2_ALG_ID mode, uint8_t *buffer,
                          size_t size, uint8_t *iv, void *userdata) {
    (void)userdata;
    return aesCFBInPlace(false, key, algorithm, bits, mode, buffer, size, iv);
}

/* RSA encryption of a session salt to the TPM key (OAEP with the key's nameAlg and the label
 * including its NUL, as the TPM decrypts it; RSAES and no padding as tpm2-tss maps them). */
static TSS2_RC rsaEncrypt(TPM2B_PUBLIC *key, size_t inSize, BYTE *in, size_t maximumOut, BYTE *out, size_t *outSize,
                          const char *label, void *userdata) {
    (void)userdata;
    if (key == NULL || in == NULL || out == NULL || outSize == NULL || label == NULL) return TSS2_ESYS_RC_BAD_REFERENCE;
    if (!ready()) return TSS2_ESYS_RC_GENERAL_FAILURE;
    int index = digestIndex(key->publicArea.nameAlg);
    if (index < 0) return TSS2_ESYS_RC_NOT_IMPLEMENTED;
    int padding;
    switch (key->publicArea.parameters.rsaDetail.scheme.scheme) {
    case TPM2_ALG_NULL: padding = RSA_NO_PADDING; break;
    case TPM2_ALG_RSAES: padding = RSA_PKCS1_PADDING; break;
    case TPM2_ALG_OAEP: padding = RSA_PKCS1_OAEP_PADDING; break;
    default: return TSS2_ESYS_RC_BAD_VALUE;
    }
    uint32_t exponent = key->publicArea.parameters.rsaDetail.exponent == 0 ? 65537 : key->publicArea.parameters.rsaDetail.exponent;

    TSS2_RC rc = TSS2_ESYS_RC_GENERAL_FAILURE;
    BIGNUM *modulus = BN_bin2bn(key->publicArea.unique.rsa.buffer, key->publicArea.unique.rsa.size, NULL);
    OSSL_PARAM_BLD *builder = OSSL_PARAM_BLD_new();
    OSSL_PARAM *parameters = NULL;
    EVP_PKEY_CTX *maker = NULL, *encryption = NULL;
    EVP_PKEY *public = NULL;
    if (modulus == NULL || builder == NULL || OSSL_PARAM_BLD_push_BN(builder, OSSL_PKEY_PARAM_RSA_N, modulus) != 1 ||
        OSSL_PARAM_BLD_push_uint32(builder, OSSL_PKEY_PARAM_RSA_E, exponent) != 1 ||
        (parameters = OSSL_PARAM_BLD_to_param(builder)) == NULL) goto done;
    maker = EVP_PKEY_CTX_new_from_name(context, "RSA", NULL);
    if (maker == NULL || EVP_PKEY_fromdata_init(maker) != 1 || EVP_PKEY_fromdata(maker, &public, EVP_PKEY_PUBLIC_KEY, parameters) != 1) goto done;
    encryption = EVP_PKEY_CTX_new_from_pkey(context, public, NULL);
    if (encryption == NULL || EVP_PKEY_encrypt_init(encryption) != 1 || EVP_PKEY_CTX_set_rsa_padding(encryption, padding) != 1) goto done;
    if (padding == RSA_PKCS1_OAEP_PADDING) {
        char *labelCopy = OPENSSL_strdup(label);
        if (labelCopy == NULL) { rc = TSS2_ESYS_RC_MEMORY; goto done; }
        if (EVP_PKEY_CTX_set0_rsa_oaep_label(encryption, labelCopy, strlen(labelCopy) + 1) != 1) {
            OPENSSL_free(labelCopy);
            goto done;
        }
        if (EVP_PKEY_CTX_set_rsa_oaep_md(encryption, digests[index]) != 1) goto done;
    }
    size_t needed = 0;
    if (EVP_PKEY_encrypt(encryption, NULL, &needed, in, inSize) != 1) goto done;
    if (needed > maximumOut) { rc = TSS2_ESYS_RC_BAD_SIZE; goto done; }
    *outSize = maximumOut;
    if (EVP_PKEY_encrypt(encryption, out, outSize, in, inSize) != 1) goto done;
    rc = TSS2_RC_SUCCESS;
done:
    EVP_PKEY_CTX_free(encryption);
    EVP_PKEY_CTX_free(maker);
    EVP_PKEY_free(public);
    OSSL_PARAM_free(parameters);
    OSSL_PARAM_BLD_free(builder);
    BN_free(modulus);
    return rc;
}

static const CESAPICryptoCallbacks table = {
    .rsaEncrypt = rsaEncrypt,
    .hashStart = hashStart,
    .hashUpdate = hashUpdate,
    .hashFinish = hashFinish,
    .hashAbort = abortBlob,
    .hmacStart = hmacStart,
    .hmacUpdate = hmacUpdate,
    .hmacFinish = hmacFinish,
    .hmacAbort = abortBlob,
    .randomBytes = randomBytes,
    .eccPoint = eccPoint,
    .aesEncrypt = aesEncrypt,
    .aesDecrypt = aesDecrypt,
    // SM4 (4.1 and later), init and userdata stay NULL: ESAPI 4.1 keeps its own SM4 and calls no
    // init, and 4.0, whose table ends after aesDecrypt with init and userdata, reads the first
    // two NULLs as those. One table therefore fits both layouts.
    .sm4Encrypt = NULL,
    .sm4Decrypt = NULL,
    .init = NULL,
    .userdata = NULL,
};

const void *cesapi_crypto_callbacks(void) {
    return ready() ? &table : NULL;
}

bool cesapi_openssl_start_lean(void) {
    /* Each of these runs once per process: asked first, the NO_ variants use up the one run of
     * ADD_ALL_CIPHERS, ADD_ALL_DIGESTS and LOAD_CONFIG, so later default initialisations
     * (EVP_MD_fetch's first name map) skip them. */
    return OPENSSL_init_crypto(
               OPENSSL_INIT_NO_ADD_ALL_CIPHERS | OPENSSL_INIT_NO_ADD_ALL_DIGESTS | OPENSSL_INIT_NO_LOAD_CONFIG, NULL) == 1;
}

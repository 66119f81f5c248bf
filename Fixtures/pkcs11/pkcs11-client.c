// A PKCS#11 consumer for the module's tests and benchmark: it loads a module with dlopen, as
// NSS and p11-kit do, and drives it the way a busy or careless application would.
//
//   pkcs11-client MODULE threads LABEL THREADS COUNT   THREADS threads at once, each in a session
//                                                       of its own, sign COUNT digests with the
//                                                       key LABEL; every signature is verified.
//   pkcs11-client MODULE finalize LABEL                C_Finalize while another thread is in
//                                                       C_Sign; then the module starts again.
//   pkcs11-client MODULE bench LABEL COUNT              COUNT timed signatures ("sample MS").
//   pkcs11-client MODULE stable LABEL COMMAND           A session finds the key LABEL; COMMAND
//                                                       (sh -c) changes the store's keys; another
//                                                       session searches again; the first one's
//                                                       handles still name LABEL and sign with it.
//
// Exits 0 when every outcome was right, 1 (with what went wrong on stderr) otherwise.
// Built by the tests: cc -O2 pkcs11-client.c -o pkcs11-client -lcrypto -lpthread -ldl
#define CRYPTOKI_GNU 1
#include <dlfcn.h>
#include <openssl/ecdsa.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <p11-kit-1/p11-kit/pkcs11.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct ck_function_list *module;
static const char *label;
static atomic_int failures;

#define FAIL(...)                                                                                                    \
    do {                                                                                                             \
        fprintf(stderr, __VA_ARGS__);                                                                                \
        fputc('\n', stderr);                                                                                         \
        atomic_fetch_add(&failures, 1);                                                                              \
    } while (0)

static ck_rv_t initialize(void) {
    struct ck_c_initialize_args args = {.flags = CKF_OS_LOCKING_OK};
    return module->C_Initialize(&args);
}

/// A session and the handles of the private and public key labelled `label`; 0 when found.
static int open_key(ck_session_handle_t *session, ck_object_handle_t *private_key, ck_object_handle_t *public_key) {
    ck_rv_t rv = module->C_OpenSession(1, CKF_SERIAL_SESSION, NULL, NULL, session);
    if (rv != CKR_OK) return (int)rv;
    ck_object_class_t classes[2] = {CKO_PRIVATE_KEY, CKO_PUBLIC_KEY};
    ck_object_handle_t *found[2] = {private_key, public_key};
    for (int index = 0; index < 2; index++) {
        struct ck_attribute template[2] = {{CKA_CLASS, &classes[index], sizeof classes[index]},
                                           {CKA_LABEL, (void *)label, strlen(label)}};
        unsigned long count = 0;
        if ((rv = module->C_FindObjectsInit(*session, template, 2)) != CKR_OK) return (int)rv;
        rv = module->C_FindObjects(*session, found[index], 1, &count);
        module->C_FindObjectsFinal(*session);
        if (rv != CKR_OK) return (int)rv;
        if (count != 1) return -1;
    }
    return 0;
}

/// The public key object's point as an EVP_PKEY, to verify with.
static EVP_PKEY *public_key_of(ck_session_handle_t session, ck_object_handle_t handle) {
    unsigned char point[67];
    struct ck_attribute attribute = {CKA_EC_POINT, point, sizeof point};
    if (module->C_GetAttributeValue(session, handle, &attribute, 1) != CKR_OK || attribute.value_len != 67) return NULL;
    // SubjectPublicKeyInfo for P-256, then the uncompressed point (CKA_EC_POINT is an OCTET STRING of it).
    static const unsigned char prefix[] = {0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x02, 0x01,
                                           0x06, 0x08, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00};
    unsigned char info[sizeof prefix + 65];
    memcpy(info, prefix, sizeof prefix);
    memcpy(info + sizeof prefix, point + 2, 65);
    const unsigned char *cursor = info;
    return d2i_PUBKEY(NULL, &cursor, sizeof info);
}

static int verifies(EVP_PKEY *key, const unsigned char digest[32], const unsigned char signature[64]) {
    ECDSA_SIG *sig = ECDSA_SIG_new();
    ECDSA_SIG_set0(sig, BN_bin2bn(signature, 32, NULL), BN_bin2bn(signature + 32, 32, NULL));
    unsigned char *der = NULL;
    int der_count = i2d_ECDSA_SIG(sig, &der);
    ECDSA_SIG_free(sig);
    EVP_PKEY_CTX *context = EVP_PKEY_CTX_new(key, NULL);
    int ok = context && EVP_PKEY_verify_init(context) == 1 &&
             EVP_PKEY_verify(context, der, (size_t)der_count, digest, 32) == 1;
    EVP_PKEY_CTX_free(context);
    OPENSSL_free(der);
    return ok;
}

/// One CKM_ECDSA signature of a random digest: the call's result, the digest and signature.
static ck_rv_t sign_once(ck_session_handle_t session, ck_object_handle_t key, unsigned char digest[32],
                         unsigned char signature[64]) {
    struct ck_mechanism mechanism = {CKM_ECDSA, NULL, 0};
    RAND_bytes(digest, 32);
    ck_rv_t rv = module->C_SignInit(session, &mechanism, key);
    if (rv != CKR_OK) return rv;
    unsigned long length = 64;
    rv = module->C_Sign(session, digest, 32, signature, &length);
    if (rv == CKR_OK && length != 64) return CKR_GENERAL_ERROR;
    return rv;
}

// MARK: threads

struct worker {
    int count;
    int verified;
};

static void *sign_many(void *argument) {
    struct worker *worker = argument;
    ck_session_handle_t session;
    ck_object_handle_t private_key, public_key;
    int opened = open_key(&session, &private_key, &public_key);
    if (opened != 0) {
        FAIL("a thread found no key \"%s\": %d", label, opened);
        return NULL;
    }
    EVP_PKEY *key = public_key_of(session, public_key);
    for (int index = 0; index < worker->count && key; index++) {
        unsigned char digest[32], signature[64];
        ck_rv_t rv = sign_once(session, private_key, digest, signature);
        if (rv != CKR_OK) {
            FAIL("C_Sign failed: 0x%lx", rv);
        } else if (!verifies(key, digest, signature)) {
            FAIL("a signature does not verify");
        } else {
            worker->verified++;
        }
    }
    if (!key) FAIL("the public key could not be read");
    EVP_PKEY_free(key);
    module->C_CloseSession(session);
    return NULL;
}

static int threads(int thread_count, int count) {
    if (initialize() != CKR_OK) return 1;
    pthread_t ids[64];
    struct worker workers[64] = {0};
    if (thread_count > 64) thread_count = 64;
    for (int index = 0; index < thread_count; index++) {
        workers[index].count = count;
        pthread_create(&ids[index], NULL, sign_many, &workers[index]);
    }
    int verified = 0;
    for (int index = 0; index < thread_count; index++) {
        pthread_join(ids[index], NULL);
        verified += workers[index].verified;
    }
    module->C_Finalize(NULL);
    printf("verified %d of %d signatures from %d threads\n", verified, thread_count * count, thread_count);
    return verified == thread_count * count && failures == 0 ? 0 : 1;
}

// MARK: finalize

static atomic_int started, finished, stop;

static void *sign_until_stopped(void *argument) {
    ck_rv_t *last = argument;
    ck_session_handle_t session;
    ck_object_handle_t private_key, public_key;
    if (open_key(&session, &private_key, &public_key) != 0) {
        FAIL("the signing thread found no key");
        atomic_store(&finished, -1);
        return NULL;
    }
    while (!atomic_load(&stop)) {
        unsigned char digest[32], signature[64];
        atomic_fetch_add(&started, 1);
        *last = sign_once(session, private_key, digest, signature);
        atomic_fetch_add(&finished, 1);
        if (*last != CKR_OK) break;
    }
    return NULL;
}

static int finalize_during_sign(void) {
    if (initialize() != CKR_OK) return 1;
    ck_rv_t last = CKR_OK;
    pthread_t signer;
    pthread_create(&signer, NULL, sign_until_stopped, &last);
    // Finalize once the signer is on its second signature: in C_Sign, or about to be.
    while (atomic_load(&started) < 2 && atomic_load(&finished) >= 0) usleep(1000);
    ck_rv_t finalized = module->C_Finalize(NULL);
    atomic_store(&stop, 1);
    pthread_join(signer, NULL);
    if (finalized != CKR_OK) FAIL("C_Finalize returned 0x%lx", finalized);
    // Its last call ended with a signature or with the module finalized: nothing else.
    if (last != CKR_OK && last != CKR_CRYPTOKI_NOT_INITIALIZED && last != CKR_SESSION_HANDLE_INVALID &&
        last != CKR_OPERATION_NOT_INITIALIZED)
        FAIL("the signing thread's last call returned 0x%lx", last);
    unsigned char digest[32], signature[64];
    if (module->C_SignInit(1, &(struct ck_mechanism){CKM_ECDSA, NULL, 0}, 1) != CKR_CRYPTOKI_NOT_INITIALIZED)
        FAIL("a finalized module went on signing");
    // Started again, the module signs as before.
    if (initialize() != CKR_OK) FAIL("the module did not start again");
    ck_session_handle_t session;
    ck_object_handle_t private_key, public_key;
    if (open_key(&session, &private_key, &public_key) != 0) {
        FAIL("no key after starting again");
    } else {
        EVP_PKEY *key = public_key_of(session, public_key);
        if (sign_once(session, private_key, digest, signature) != CKR_OK || !key || !verifies(key, digest, signature))
            FAIL("no good signature after starting again");
        EVP_PKEY_free(key);
    }
    module->C_Finalize(NULL);
    printf("finalized during signature %d; the signing thread's last call returned 0x%lx\n", atomic_load(&started),
           last);
    return failures == 0 ? 0 : 1;
}

// MARK: stable

/// The label of object `handle`, into `text` (NUL-terminated); 0 when read.
static int label_of(ck_session_handle_t session, ck_object_handle_t handle, char *text, size_t capacity) {
    struct ck_attribute attribute = {CKA_LABEL, text, capacity - 1};
    if (module->C_GetAttributeValue(session, handle, &attribute, 1) != CKR_OK) return -1;
    text[attribute.value_len] = 0;
    return 0;
}

static int stable_handles(const char *command) {
    if (initialize() != CKR_OK) return 1;
    ck_session_handle_t first, second;
    ck_object_handle_t private_key, public_key, ignored_private, ignored_public;
    if (open_key(&first, &private_key, &public_key) != 0) {
        FAIL("no key \"%s\" before the change", label);
        return 1;
    }
    EVP_PKEY *key = public_key_of(first, public_key);
    if (!key) FAIL("the public key could not be read");
    int status = system(command);
    if (status != 0) FAIL("the command changing the keys exited with %d", status);
    // Another session's search asks the agent again, and learns of the change.
    if (open_key(&second, &ignored_private, &ignored_public) != 0) FAIL("no key \"%s\" after the change", label);
    char found[256];
    if (label_of(first, private_key, found, sizeof found) != 0 || strcmp(found, label) != 0)
        FAIL("the first session's private key handle now names \"%s\", not \"%s\"", found, label);
    if (ignored_private != private_key) FAIL("the two sessions found the key under different handles");
    unsigned char digest[32], signature[64];
    ck_rv_t rv = sign_once(first, private_key, digest, signature);
    if (rv != CKR_OK) {
        FAIL("C_Sign with the handle found before the change failed: 0x%lx", rv);
    } else if (key && !verifies(key, digest, signature)) {
        FAIL("the handle found before the change signed with another key");
    }
    EVP_PKEY_free(key);
    module->C_Finalize(NULL);
    printf("the handle found before the change still signs as \"%s\"\n", label);
    return failures == 0 ? 0 : 1;
}

// MARK: bench

static int bench(int count) {
    if (initialize() != CKR_OK) return 1;
    ck_session_handle_t session;
    ck_object_handle_t private_key, public_key;
    if (open_key(&session, &private_key, &public_key) != 0) {
        FAIL("no key \"%s\"", label);
        return 1;
    }
    for (int index = 0; index < count; index++) {
        unsigned char digest[32], signature[64];
        struct timespec start, end;
        clock_gettime(CLOCK_MONOTONIC, &start);
        ck_rv_t rv = sign_once(session, private_key, digest, signature);
        clock_gettime(CLOCK_MONOTONIC, &end);
        if (rv != CKR_OK) {
            FAIL("C_Sign failed: 0x%lx", rv);
            break;
        }
        printf("sample %.6f\n", (double)(end.tv_sec - start.tv_sec) * 1e3 + (double)(end.tv_nsec - start.tv_nsec) / 1e6);
    }
    module->C_Finalize(NULL);
    return failures == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: pkcs11-client MODULE threads|finalize|bench|stable LABEL [ARGS]\n");
        return 2;
    }
    void *library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    ck_rv_t (*get)(struct ck_function_list **) = library ? (ck_rv_t(*)(struct ck_function_list **))dlsym(library, "C_GetFunctionList") : NULL;
    if (!get || get(&module) != CKR_OK) {
        fprintf(stderr, "cannot load %s: %s\n", argv[1], dlerror());
        return 1;
    }
    label = argv[3];
    if (strcmp(argv[2], "threads") == 0 && argc == 6) return threads(atoi(argv[4]), atoi(argv[5]));
    if (strcmp(argv[2], "finalize") == 0) return finalize_during_sign();
    if (strcmp(argv[2], "bench") == 0 && argc == 5) return bench(atoi(argv[4]));
    if (strcmp(argv[2], "stable") == 0 && argc == 5) return stable_handles(argv[4]);
    fprintf(stderr, "unknown mode %s\n", argv[2]);
    return 2;
}

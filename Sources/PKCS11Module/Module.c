// The PKCS#11 functions the module implements: a slot with a token per agent (per store), whose
// objects are the keys that agent offers (each as a private and a public key object,
// and a certificate object where the keychain has the key's certificate: an identity), and
// ECDSA signatures by them. No login: each use is decided by the agent for this process,
// under the key's own access control (it may ask the person). Everything else is in
// FunctionList.c, answering CKR_FUNCTION_NOT_SUPPORTED.
#include "Module.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define TK_MAX_SESSIONS 64
#define TK_MAX_SIGNED (240 * 1024)

struct session {
    int open;
    ck_flags_t flags;
    /// The index of the session's slot in `slots`.
    int slot;
    // Find: the handles that matched, and how many were handed out.
    int finding;
    ck_object_handle_t found[3 * TK_MAX_IDENTITIES];
    unsigned long found_count;
    unsigned long found_next;
    // Sign: the key and mechanism, and what SignUpdate gave so far.
    int signing;
    ck_mechanism_type_t mechanism;
    struct tk_identity key;
    /// The socket of the agent that offers `key`.
    char key_socket[TK_SOCKET_PATH];
    struct tk_buffer data;
};

/// One agent, that is one store: a slot with its token. Its keys, each at the entry it got when
/// a search first found it: object 3i+1 is entry i's private key, 3i+2 its public key, 3i+3 its
/// certificate (when `certificate_of[i]` is not -1). An entry keeps its key for as long as the
/// module is initialized, so that a handle another session found never comes to name another
/// key; `present[i]` says whether the agent offered it at the last search that reached it.
struct slot {
    char socket[TK_SOCKET_PATH];
    struct tk_identity identities[TK_MAX_IDENTITIES];
    int present[TK_MAX_IDENTITIES];
    /// How many entries are in use.
    int identity_count;
    struct tk_certificate certificates[TK_MAX_IDENTITIES];
    int certificate_count;
    int certificate_of[TK_MAX_IDENTITIES];
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/// Read by every call without the lock: C_Finalize may run while another thread is in C_Sign.
static atomic_int initialized;
static struct session sessions[TK_MAX_SESSIONS];
/// Set by C_Initialize from TPM_KEYCHAIN_AGENT_SOCK; slot ID i+1 is slots[i].
static struct slot slots[TK_MAX_SLOTS];
static int slot_count;

enum object_kind { private_key_object, public_key_object, certificate_object };

/// The slot of PKCS#11 slot ID `id`, or NULL.
static struct slot *slot_for(ck_slot_id_t id) {
    return id >= 1 && id <= (ck_slot_id_t)slot_count ? &slots[id - 1] : NULL;
}

/// Key `*index`'s object `handle` in `slot` and its kind, or 0 for no such object (under the lock).
static int object(const struct slot *slot, ck_object_handle_t handle, int *index, enum object_kind *kind) {
    if (handle < 1 || handle > 3 * (ck_object_handle_t)slot->identity_count) return 0;
    *index = (int)((handle - 1) / 3);
    *kind = (enum object_kind)((handle - 1) % 3);
    if (!slot->present[*index]) return 0;
    return *kind != certificate_object || slot->certificate_of[*index] >= 0;
}

static void forget_certificates(struct slot *slot) {
    for (int index = 0; index < slot->certificate_count; index++) tk_certificate_free(&slot->certificates[index]);
    slot->certificate_count = 0;
}

/// The entry of the key at `point`, or -1 (under the lock).
static int entry_of(const struct slot *slot, const unsigned char point[65]) {
    for (int index = 0; index < slot->identity_count; index++) {
        if (memcmp(slot->identities[index].point, point, 65) == 0) return index;
    }
    return -1;
}

/// An entry for a key met for the first time: a new one, else (all in use) the first whose key
/// the agent no longer offers, whose handles then name the new key; -1 when every entry holds a
/// key still offered (under the lock).
static int new_entry(struct slot *slot) {
    if (slot->identity_count < TK_MAX_IDENTITIES) return slot->identity_count++;
    for (int index = 0; index < slot->identity_count; index++) {
        if (!slot->present[index]) return index;
    }
    return -1;
}

/// Takes what the agent offers now into `slot`: its keys (each keeping its entry, those no
/// longer offered marked so) and their certificates, which replace the slot's (under the lock).
static void take_offered(struct slot *slot, const struct tk_identity *offered, int offered_count,
                         struct tk_certificate *certificates, int certificate_count) {
    memset(slot->present, 0, sizeof slot->present);
    // Known keys first, so that a new key can only take the entry of one that is really gone.
    int known[TK_MAX_IDENTITIES];
    for (int index = 0; index < offered_count; index++) {
        known[index] = entry_of(slot, offered[index].point);
        if (known[index] < 0) continue;
        slot->identities[known[index]] = offered[index];
        slot->present[known[index]] = 1;
    }
    for (int index = 0; index < offered_count; index++) {
        if (known[index] >= 0) continue;
        int entry = new_entry(slot);
        if (entry < 0) break;
        slot->identities[entry] = offered[index];
        slot->present[entry] = 1;
    }
    forget_certificates(slot);
    memcpy(slot->certificates, certificates, sizeof *certificates * (size_t)certificate_count);
    slot->certificate_count = certificate_count;
    for (int index = 0; index < slot->identity_count; index++) {
        slot->certificate_of[index] = -1;
        for (int candidate = 0; candidate < slot->certificate_count; candidate++) {
            if (memcmp(slot->certificates[candidate].point, slot->identities[index].point, 65) == 0) {
                slot->certificate_of[index] = candidate;
                break;
            }
        }
    }
}

static void pad(unsigned char *field, size_t size, const char *text) {
    memset(field, ' ', size);
    memcpy(field, text, strlen(text) < size ? strlen(text) : size);
}

static struct session *session_for(ck_session_handle_t handle) {
    if (handle < 1 || handle > TK_MAX_SESSIONS || !sessions[handle - 1].open) return NULL;
    return &sessions[handle - 1];
}

static void close_session(struct session *session) {
    tk_buffer_free(&session->data);
    memset(session, 0, sizeof *session);
}

ck_rv_t C_Initialize(void *init_args) {
    if (init_args) {
        struct ck_c_initialize_args *args = init_args;
        if (args->reserved) return CKR_ARGUMENTS_BAD;
        // Own locks are used whatever the caller offers; a caller that forbids OS threads is refused.
        if ((args->flags & CKF_LIBRARY_CANT_CREATE_OS_THREADS) && !(args->flags & CKF_OS_LOCKING_OK))
            return CKR_NEED_TO_CREATE_THREADS;
    }
    pthread_mutex_lock(&lock);
    ck_rv_t result = initialized ? CKR_CRYPTOKI_ALREADY_INITIALIZED : CKR_OK;
    if (!initialized) {
        char sockets[TK_MAX_SLOTS][TK_SOCKET_PATH];
        slot_count = tk_agent_sockets(sockets, TK_MAX_SLOTS);
        for (int index = 0; index < slot_count; index++) {
            memset(&slots[index], 0, sizeof slots[index]);
            memcpy(slots[index].socket, sockets[index], TK_SOCKET_PATH);
        }
        initialized = 1;
    }
    pthread_mutex_unlock(&lock);
    return result;
}

ck_rv_t C_Finalize(void *reserved) {
    if (reserved) return CKR_ARGUMENTS_BAD;
    pthread_mutex_lock(&lock);
    ck_rv_t result = initialized ? CKR_OK : CKR_CRYPTOKI_NOT_INITIALIZED;
    for (int index = 0; index < TK_MAX_SESSIONS; index++) close_session(&sessions[index]);
    initialized = 0;
    for (int index = 0; index < slot_count; index++) {
        slots[index].identity_count = 0;
        forget_certificates(&slots[index]);
    }
    pthread_mutex_unlock(&lock);
    return result;
}

ck_rv_t C_GetFunctionList(struct ck_function_list **list) {
    if (!list) return CKR_ARGUMENTS_BAD;
    *list = &tk_function_list;
    return CKR_OK;
}

ck_rv_t C_GetInfo(struct ck_info *info) {
    if (!info) return CKR_ARGUMENTS_BAD;
    memset(info, 0, sizeof *info);
    info->cryptoki_version = (struct ck_version){2, 40};
    pad(info->manufacturer_id, sizeof info->manufacturer_id, "TPMKeychain");
    pad(info->library_description, sizeof info->library_description, "Keys in the TPM, through the keychain");
    info->library_version = (struct ck_version){0, 4};
    return initialized ? CKR_OK : CKR_CRYPTOKI_NOT_INITIALIZED;
}

ck_rv_t C_GetSlotList(unsigned char token_present, ck_slot_id_t *slot_list, unsigned long *count) {
    (void)token_present;
    if (!initialized) return CKR_CRYPTOKI_NOT_INITIALIZED;
    if (!count) return CKR_ARGUMENTS_BAD;
    unsigned long needed = (unsigned long)slot_count;
    if (slot_list) {
        if (*count < needed) {
            *count = needed;
            return CKR_BUFFER_TOO_SMALL;
        }
        for (unsigned long index = 0; index < needed; index++) slot_list[index] = index + 1;
    }
    *count = needed;
    return CKR_OK;
}

ck_rv_t C_GetSlotInfo(ck_slot_id_t slot, struct ck_slot_info *info) {
    if (!initialized) return CKR_CRYPTOKI_NOT_INITIALIZED;
    if (!slot_for(slot)) return CKR_SLOT_ID_INVALID;
    if (!info) return CKR_ARGUMENTS_BAD;
    memset(info, 0, sizeof *info);
    pad(info->slot_description, sizeof info->slot_description, "TPMKeychain ssh agent");
    pad(info->manufacturer_id, sizeof info->manufacturer_id, "TPMKeychain");
    info->flags = CKF_TOKEN_PRESENT;
    return CKR_OK;
}

ck_rv_t C_GetTokenInfo(ck_slot_id_t slot, struct ck_token_info *info) {
    if (!initialized) return CKR_CRYPTOKI_NOT_INITIALIZED;
    if (!info) return CKR_ARGUMENTS_BAD;
    char socket[TK_SOCKET_PATH];
    pthread_mutex_lock(&lock);
    struct slot *found = slot_for(slot);
    if (found) memcpy(socket, found->socket, sizeof socket);
    pthread_mutex_unlock(&lock);
    if (!found) return CKR_SLOT_ID_INVALID;
    // A token per store, named by the agent: "TPMKeychain" for the default store (and when no
    // agent answers), "TPMKeychain NAME" for the store named NAME.
    char store[64], label[80] = "TPMKeychain";
    if (tk_agent_store_name(socket, store, sizeof store) == 0 && strcmp(store, "default") != 0)
        snprintf(label, sizeof label, "TPMKeychain %s", store);
    memset(info, 0, sizeof *info);
    pad(info->label, sizeof info->label, label);
    pad(info->manufacturer_id, sizeof info->manufacturer_id, "TPMKeychain");
    pad(info->model, sizeof info->model, "TPM 2.0");
    char serial[24];
    snprintf(serial, sizeof serial, "%lu", (unsigned long)slot);
    pad(info->serial_number, sizeof info->serial_number, serial);
    // Keys are made with tpm-keychain key create, never through the module (C_CreateObject and
    // C_GenerateKeyPair are not supported); no PIN: the agent asks the person when a key's access
    // control wants one. Read-write sessions are opened, as tools like pkcs11-tool --test ask,
    // though nothing can be written through them: a write-protected token could not have them.
    info->flags = CKF_TOKEN_INITIALIZED;
    info->max_session_count = TK_MAX_SESSIONS;
    info->max_rw_session_count = TK_MAX_SESSIONS;
    info->max_pin_len = 0;
    info->min_pin_len = 0;
    info->total_public_memory = info->free_public_memory = CK_UNAVAILABLE_INFORMATION;
    info->total_private_memory = info->free_private_memory = CK_UNAVAILABLE_INFORMATION;
    return CKR_OK;
}

static const ck_mechanism_type_t mechanisms[] = {CKM_ECDSA, CKM_ECDSA_SHA256};

ck_rv_t C_GetMechanismList(ck_slot_id_t slot, ck_mechanism_type_t *list, unsigned long *count) {
    if (!initialized) return CKR_CRYPTOKI_NOT_INITIALIZED;
    if (!slot_for(slot)) return CKR_SLOT_ID_INVALID;
    if (!count) return CKR_ARGUMENTS_BAD;
    unsigned long needed = sizeof mechanisms / sizeof mechanisms[0];
    if (list) {
        if (*count < needed) {
            *count = needed;
            return CKR_BUFFER_TOO_SMALL;
        }
        memcpy(list, mechanisms, sizeof mechanisms);
    }
    *count = needed;
    return CKR_OK;
}

ck_rv_t C_GetMechanismInfo(ck_slot_id_t slot, ck_mechanism_type_t type, struct ck_mechanism_info *info) {
    if (!initialized) return CKR_CRYPTOKI_NOT_INITIALIZED;
    if (!slot_for(slot)) return CKR_SLOT_ID_INVALID;
    if (!info) return CKR_ARGUMENTS_BAD;
    if (type != CKM_ECDSA && type != CKM_ECDSA_SHA256) return CKR_MECHANISM_INVALID;
    info->min_key_size = 256;
    info->max_key_size = 256;
    info->flags = CKF_SIGN | CKF_HW | CKF_EC_F_P | CKF_EC_NAMEDCURVE | CKF_EC_UNCOMPRESS;
    return CKR_OK;
}

ck_rv_t C_OpenSession(ck_slot_id_t slot, ck_flags_t flags, void *application, ck_notify_t notify,
                      ck_session_handle_t *handle) {
    (void)application;
    (void)notify;
    if (!initialized) return CKR_CRYPTOKI_NOT_INITIALIZED;
    if (!slot_for(slot)) return CKR_SLOT_ID_INVALID;
    if (!(flags & CKF_SERIAL_SESSION)) return CKR_SESSION_PARALLEL_NOT_SUPPORTED;
    if (!handle) return CKR_ARGUMENTS_BAD;
    pthread_mutex_lock(&lock);
    ck_rv_t result = CKR_SESSION_COUNT;
    for (int index = 0; index < TK_MAX_SESSIONS; index++) {
        if (sessions[index].open) continue;
        memset(&sessions[index], 0, sizeof sessions[index]);
        sessions[index].open = 1;
        sessions[index].flags = flags;
        sessions[index].slot = (int)slot - 1;
        *handle = (ck_session_handle_t)index + 1;
        result = CKR_OK;
        break;
    }
    pthread_mutex_unlock(&lock);
    return result;
}

ck_rv_t C_CloseSession(ck_session_handle_t handle) {
    if (!initialized) return CKR_CRYPTOKI_NOT_INITIALIZED;
    pthread_mutex_lock(&lock);
    struct session *session = session_for(handle);
    if (session) close_session(session);
    pthread_mutex_unlock(&lock);
    return session ? CKR_OK : CKR_SESSION_HANDLE_INVALID;
}

ck_rv_t C_CloseAllSessions(ck_slot_id_t slot) {
    if (!initialized) return CKR_CRYPTOKI_NOT_INITIALIZED;
    if (!slot_for(slot)) return CKR_SLOT_ID_INVALID;
    pthread_mutex_lock(&lock);
    for (int index = 0; index < TK_MAX_SESSIONS; index++) {
        if (sessions[index].open && sessions[index].slot == (int)slot - 1) close_session(&sessions[index]);
    }
    pthread_mutex_unlock(&lock);
    return CKR_OK;
}

ck_rv_t C_GetSessionInfo(ck_session_handle_t handle, struct ck_session_info *info) {
    if (!initialized) return CKR_CRYPTOKI_NOT_INITIALIZED;
    if (!info) return CKR_ARGUMENTS_BAD;
    pthread_mutex_lock(&lock);
    struct session *session = session_for(handle);
    if (session) {
        memset(info, 0, sizeof *info);
        info->slot_id = (ck_slot_id_t)session->slot + 1;
        info->state = session->flags & CKF_RW_SESSION ? CKS_RW_USER_FUNCTIONS : CKS_RO_USER_FUNCTIONS;
        info->flags = session->flags;
    }
    pthread_mutex_unlock(&lock);
    return session ? CKR_OK : CKR_SESSION_HANDLE_INVALID;
}

ck_rv_t C_Login(ck_session_handle_t handle, ck_user_type_t user, unsigned char *pin, unsigned long pin_len) {
    (void)pin;
    (void)pin_len;
    if (!initialized) return CKR_CRYPTOKI_NOT_INITIALIZED;
    pthread_mutex_lock(&lock);
    int valid = session_for(handle) != NULL;
    pthread_mutex_unlock(&lock);
    if (!valid) return CKR_SESSION_HANDLE_INVALID;
    // No PIN of the module's own: each use is the agent's to decide, and it asks the person.
    return user == CKU_USER ? CKR_USER_ALREADY_LOGGED_IN : CKR_USER_TYPE_INVALID;
}

ck_rv_t C_Logout(ck_session_handle_t handle) {
    if (!initialized) return CKR_CRYPTOKI_NOT_INITIALIZED;
    pthread_mutex_lock(&lock);
    int valid = session_for(handle) != NULL;
    pthread_mutex_unlock(&lock);
    return valid ? CKR_OK : CKR_SESSION_HANDLE_INVALID;
}

// MARK: Objects

static const unsigned char p256_oid[] = {0x06, 0x08, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x03, 0x01, 0x07};

/// Copies one attribute's value out, as C_GetAttributeValue's rules say.
static ck_rv_t give(struct ck_attribute *attribute, const void *value, unsigned long count) {
    if (!attribute->value) {
        attribute->value_len = count;
        return CKR_OK;
    }
    if (attribute->value_len < count) {
        attribute->value_len = CK_UNAVAILABLE_INFORMATION;
        return CKR_BUFFER_TOO_SMALL;
    }
    memcpy(attribute->value, value, count);
    attribute->value_len = count;
    return CKR_OK;
}

static ck_rv_t give_bool(struct ck_attribute *attribute, unsigned char value) {
    return give(attribute, &value, 1);
}

static ck_rv_t give_ulong(struct ck_attribute *attribute, unsigned long value) {
    return give(attribute, &value, sizeof value);
}

/// The value of a certificate object's `attribute->type`.
static ck_rv_t certificate_attribute(const struct tk_certificate *certificate, struct ck_attribute *attribute) {
    switch (attribute->type) {
    case CKA_CERTIFICATE_TYPE: return give_ulong(attribute, CKC_X_509);
    case CKA_VALUE: return give(attribute, certificate->der, certificate->der_count);
    case CKA_SUBJECT: return give(attribute, certificate->subject, certificate->subject_count);
    case CKA_ISSUER: return give(attribute, certificate->issuer, certificate->issuer_count);
    case CKA_SERIAL_NUMBER: return give(attribute, certificate->serial, certificate->serial_count);
    case CKA_TRUSTED: return give_bool(attribute, 0);
    case CKA_CERTIFICATE_CATEGORY: return give_ulong(attribute, 1);  // the token user's own
    case CKA_JAVA_MIDP_SECURITY_DOMAIN: return give_ulong(attribute, 0);
    case CKA_START_DATE:
    case CKA_END_DATE:
    case CKA_URL:
    case CKA_HASH_OF_SUBJECT_PUBLIC_KEY:
    case CKA_HASH_OF_ISSUER_PUBLIC_KEY: return give(attribute, "", 0);
    default: break;
    }
    attribute->value_len = CK_UNAVAILABLE_INFORMATION;
    return CKR_ATTRIBUTE_TYPE_INVALID;
}

/// The value of `attribute->type` for object `handle` (under the lock).
static ck_rv_t attribute_of(const struct slot *slot, ck_object_handle_t handle, struct ck_attribute *attribute) {
    int index;
    enum object_kind kind;
    if (!object(slot, handle, &index, &kind)) return CKR_OBJECT_HANDLE_INVALID;
    const struct tk_identity *identity = &slot->identities[index];
    const struct tk_certificate *certificate =
        slot->certificate_of[index] >= 0 ? &slot->certificates[slot->certificate_of[index]] : NULL;
    int private_key = kind == private_key_object;
    switch (attribute->type) {
    case CKA_CLASS:
        return give_ulong(attribute, kind == certificate_object ? CKO_CERTIFICATE
                                     : private_key                ? CKO_PRIVATE_KEY
                                                                  : CKO_PUBLIC_KEY);
    case CKA_TOKEN: return give_bool(attribute, 1);
    case CKA_PRIVATE: return give_bool(attribute, 0);
    case CKA_MODIFIABLE: return give_bool(attribute, 0);
    case CKA_LABEL: return give(attribute, identity->label, strlen(identity->label));
    // The x coordinate's first 20 bytes: stable, and shared by the key's objects as PKCS#11 wants.
    case CKA_ID: return give(attribute, identity->point + 1, 20);
    default: break;
    }
    if (kind == certificate_object) return certificate_attribute(certificate, attribute);
    switch (attribute->type) {
    // A key's subject is its certificate's, where it has one (NSS pairs them by it).
    case CKA_SUBJECT:
        if (certificate) return give(attribute, certificate->subject, certificate->subject_count);
        return give(attribute, "", 0);
    case CKA_KEY_TYPE: return give_ulong(attribute, CKK_EC);
    case CKA_EC_PARAMS: return give(attribute, p256_oid, sizeof p256_oid);
    case CKA_EC_POINT:
        if (private_key) break;
        {
            // DER: an OCTET STRING holding the uncompressed point.
            unsigned char point[67] = {0x04, 65};
            memcpy(point + 2, identity->point, 65);
            return give(attribute, point, sizeof point);
        }
    case CKA_LOCAL: return give_bool(attribute, 1);
    case CKA_SIGN: return give_bool(attribute, private_key);
    case CKA_VERIFY: return give_bool(attribute, !private_key);
    case CKA_DERIVE:
    case CKA_DECRYPT:
    case CKA_ENCRYPT:
    case CKA_UNWRAP:
    case CKA_WRAP:
    case CKA_SIGN_RECOVER:
    case CKA_VERIFY_RECOVER: return give_bool(attribute, 0);
    case CKA_SENSITIVE:
    case CKA_ALWAYS_SENSITIVE:
    case CKA_NEVER_EXTRACTABLE:
        if (private_key) return give_bool(attribute, 1);
        break;
    case CKA_EXTRACTABLE:
        if (private_key) return give_bool(attribute, 0);
        break;
    case CKA_ALWAYS_AUTHENTICATE:
        if (private_key) return give_bool(attribute, 0);
        break;
    default: break;
    }
    attribute->value_len = CK_UNAVAILABLE_INFORMATION;
    return CKR_ATTRIBUTE_TYPE_INVALID;
}

ck_rv_t C_GetAttributeValue(ck_session_handle_t handle, ck_object_handle_t object, struct ck_attribute *template,
                            unsigned long count) {
    if (!initialized) return CKR_CRYPTOKI_NOT_INITIALIZED;
    if (!template && count) return CKR_ARGUMENTS_BAD;
    pthread_mutex_lock(&lock);
    struct session *session = session_for(handle);
    ck_rv_t result = session ? CKR_OK : CKR_SESSION_HANDLE_INVALID;
    for (unsigned long index = 0; result != CKR_SESSION_HANDLE_INVALID && index < count; index++) {
        ck_rv_t one = attribute_of(&slots[session->slot], object, &template[index]);
        if (one == CKR_OBJECT_HANDLE_INVALID) {
            result = one;
            break;
        }
        // Every attribute is answered; the first problem is what the call returns.
        if (one != CKR_OK && result == CKR_OK) result = one;
    }
    pthread_mutex_unlock(&lock);
    return result;
}

/// Whether object `handle` has every value `template` gives (under the lock).
static int matches(const struct slot *slot, ck_object_handle_t handle, const struct ck_attribute *template,
                   unsigned long count) {
    for (unsigned long index = 0; index < count; index++) {
        // A value longer than the template's cannot match it: the template's length is enough room.
        unsigned long wanted = template[index].value_len;
        if (wanted == CK_UNAVAILABLE_INFORMATION || (wanted && !template[index].value)) return 0;
        unsigned char small[256];
        unsigned char *value = wanted <= sizeof small ? small : malloc(wanted);
        if (!value) return 0;
        struct ck_attribute actual = {template[index].type, value, wanted};
        int same = attribute_of(slot, handle, &actual) == CKR_OK && actual.value_len == wanted &&
                   (wanted == 0 || memcmp(value, template[index].value, wanted) == 0);
        if (value != small) free(value);
        if (!same) return 0;
    }
    return 1;
}

ck_rv_t C_FindObjectsInit(ck_session_handle_t handle, struct ck_attribute *template, unsigned long count) {
    if (!initialized) return CKR_CRYPTOKI_NOT_INITIALIZED;
    if (!template && count) return CKR_ARGUMENTS_BAD;
    char socket[TK_SOCKET_PATH];
    pthread_mutex_lock(&lock);
    struct session *asking = session_for(handle);
    if (asking) memcpy(socket, slots[asking->slot].socket, sizeof socket);
    pthread_mutex_unlock(&lock);
    if (!asking) return CKR_SESSION_HANDLE_INVALID;
    // Asked outside the lock: the agent may take a moment, and other sessions go on meanwhile.
    struct tk_identity *fresh = calloc(TK_MAX_IDENTITIES, sizeof *fresh);
    struct tk_certificate *fresh_certificates = calloc(TK_MAX_IDENTITIES, sizeof *fresh_certificates);
    if (!fresh || !fresh_certificates) {
        free(fresh);
        free(fresh_certificates);
        return CKR_HOST_MEMORY;
    }
    int fresh_count = tk_agent_identities(socket, fresh, TK_MAX_IDENTITIES);
    int fresh_certificate_count =
        fresh_count > 0 ? tk_agent_certificates(socket, fresh_certificates, TK_MAX_IDENTITIES) : 0;
    if (fresh_certificate_count < 0) fresh_certificate_count = 0;
    pthread_mutex_lock(&lock);
    struct session *session = session_for(handle);
    ck_rv_t result = CKR_OK;
    if (!session) {
        result = CKR_SESSION_HANDLE_INVALID;
    } else if (session->finding) {
        result = CKR_OPERATION_ACTIVE;
    } else {
        // No agent: this search finds nothing (the token stays, empty, rather than an error every
        // caller reports), and what other sessions found is left as it was.
        struct slot *slot = &slots[session->slot];
        if (fresh_count >= 0) {
            take_offered(slot, fresh, fresh_count, fresh_certificates, fresh_certificate_count);
            fresh_certificate_count = 0;  // kept: not freed below
        }
        session->finding = 1;
        session->found_count = 0;
        session->found_next = 0;
        for (ck_object_handle_t object_handle = 1;
             fresh_count >= 0 && object_handle <= 3 * (ck_object_handle_t)slot->identity_count; object_handle++) {
            int index;
            enum object_kind kind;
            if (object(slot, object_handle, &index, &kind) && matches(slot, object_handle, template, count))
                session->found[session->found_count++] = object_handle;
        }
    }
    pthread_mutex_unlock(&lock);
    for (int index = 0; index < fresh_certificate_count; index++) tk_certificate_free(&fresh_certificates[index]);
    free(fresh);
    free(fresh_certificates);
    return result;
}

ck_rv_t C_FindObjects(ck_session_handle_t handle, ck_object_handle_t *objects, unsigned long maximum,
                      unsigned long *count) {
    if (!initialized) return CKR_CRYPTOKI_NOT_INITIALIZED;
    if (!count || (!objects && maximum)) return CKR_ARGUMENTS_BAD;
    pthread_mutex_lock(&lock);
    struct session *session = session_for(handle);
    ck_rv_t result = CKR_OK;
    if (!session) {
        result = CKR_SESSION_HANDLE_INVALID;
    } else if (!session->finding) {
        result = CKR_OPERATION_NOT_INITIALIZED;
    } else {
        *count = 0;
        while (*count < maximum && session->found_next < session->found_count)
            objects[(*count)++] = session->found[session->found_next++];
    }
    pthread_mutex_unlock(&lock);
    return result;
}

ck_rv_t C_FindObjectsFinal(ck_session_handle_t handle) {
    if (!initialized) return CKR_CRYPTOKI_NOT_INITIALIZED;
    pthread_mutex_lock(&lock);
    struct session *session = session_for(handle);
    ck_rv_t result = !session ? CKR_SESSION_HANDLE_INVALID : session->finding ? CKR_OK : CKR_OPERATION_NOT_INITIALIZED;
    if (session) session->finding = 0;
    pthread_mutex_unlock(&lock);
    return result;
}

// MARK: Signing

ck_rv_t C_SignInit(ck_session_handle_t handle, struct ck_mechanism *mechanism, ck_object_handle_t key) {
    if (!initialized) return CKR_CRYPTOKI_NOT_INITIALIZED;
    if (!mechanism) return CKR_ARGUMENTS_BAD;
    pthread_mutex_lock(&lock);
    struct session *session = session_for(handle);
    ck_rv_t result = CKR_OK;
    int index;
    enum object_kind kind;
    if (!session) {
        result = CKR_SESSION_HANDLE_INVALID;
    } else if (session->signing) {
        result = CKR_OPERATION_ACTIVE;
    } else if (mechanism->mechanism != CKM_ECDSA && mechanism->mechanism != CKM_ECDSA_SHA256) {
        result = CKR_MECHANISM_INVALID;
    } else if (!object(&slots[session->slot], key, &index, &kind)) {
        result = CKR_KEY_HANDLE_INVALID;
    } else if (kind != private_key_object) {
        result = CKR_KEY_FUNCTION_NOT_PERMITTED;  // a public key or a certificate
    } else {
        session->signing = 1;
        session->mechanism = mechanism->mechanism;
        session->key = slots[session->slot].identities[index];
        memcpy(session->key_socket, slots[session->slot].socket, sizeof session->key_socket);
        tk_buffer_free(&session->data);
    }
    pthread_mutex_unlock(&lock);
    return result;
}

/// A key as a signature needs it: the identity, and the socket of the agent that offers it.
struct signing_key {
    struct tk_identity identity;
    char socket[TK_SOCKET_PATH];
};

/// Ends the session's signature, taking its key, mechanism and data out (under the lock).
static void end_signing(struct session *session, struct signing_key *key, ck_mechanism_type_t *mechanism,
                        struct tk_buffer *data) {
    key->identity = session->key;
    memcpy(key->socket, session->key_socket, sizeof key->socket);
    *mechanism = session->mechanism;
    *data = session->data;
    memset(&session->data, 0, sizeof session->data);
    session->signing = 0;
}

/// Signs `data` with `key`: the agent is asked outside the lock (it may ask the person).
static ck_rv_t sign(const struct signing_key *key, ck_mechanism_type_t mechanism, const unsigned char *data,
                    unsigned long count, unsigned char *signature, unsigned long *signature_len) {
    if (mechanism == CKM_ECDSA && count != 32) return CKR_DATA_LEN_RANGE;  // a SHA-256 digest
    if (count > TK_MAX_SIGNED) return CKR_DATA_LEN_RANGE;
    unsigned char raw[64];
    ck_rv_t result = tk_agent_sign(key->socket, &key->identity, data, count, mechanism == CKM_ECDSA, raw);
    if (result == CKR_OK) {
        memcpy(signature, raw, 64);
        *signature_len = 64;
    }
    return result;
}

/// The common start of C_Sign and C_SignFinal: the session's signature is taken out for this
/// call (`*taken` set), or the call answers without it: only a length asked for, or a buffer too
/// short (the operation stays active, as PKCS#11 wants), or no such operation.
static ck_rv_t take_signing(ck_session_handle_t handle, unsigned char *signature, unsigned long *signature_len,
                            struct signing_key *key, ck_mechanism_type_t *mechanism, struct tk_buffer *data,
                            int *taken) {
    *taken = 0;
    pthread_mutex_lock(&lock);
    struct session *session = session_for(handle);
    ck_rv_t result = CKR_OK;
    if (!session || !session->signing) {
        result = session ? CKR_OPERATION_NOT_INITIALIZED : CKR_SESSION_HANDLE_INVALID;
    } else if (!signature || *signature_len < 64) {
        result = signature ? CKR_BUFFER_TOO_SMALL : CKR_OK;
        *signature_len = 64;
    } else {
        end_signing(session, key, mechanism, data);
        *taken = 1;
    }
    pthread_mutex_unlock(&lock);
    return result;
}

ck_rv_t C_Sign(ck_session_handle_t handle, unsigned char *data, unsigned long data_len, unsigned char *signature,
               unsigned long *signature_len) {
    if (!initialized) return CKR_CRYPTOKI_NOT_INITIALIZED;
    if (!signature_len || (!data && data_len)) return CKR_ARGUMENTS_BAD;
    struct signing_key key;
    ck_mechanism_type_t mechanism;
    struct tk_buffer kept = {0};
    int taken;
    ck_rv_t result = take_signing(handle, signature, signature_len, &key, &mechanism, &kept, &taken);
    tk_buffer_free(&kept);
    if (!taken) return result;
    return sign(&key, mechanism, data, data_len, signature, signature_len);
}

ck_rv_t C_SignUpdate(ck_session_handle_t handle, unsigned char *part, unsigned long part_len) {
    if (!initialized) return CKR_CRYPTOKI_NOT_INITIALIZED;
    if (!part && part_len) return CKR_ARGUMENTS_BAD;
    pthread_mutex_lock(&lock);
    struct session *session = session_for(handle);
    ck_rv_t result = CKR_OK;
    if (!session) {
        result = CKR_SESSION_HANDLE_INVALID;
    } else if (!session->signing) {
        result = CKR_OPERATION_NOT_INITIALIZED;
    } else {
        tk_buffer_append(&session->data, part, part_len);
        if (session->data.failed || session->data.count > TK_MAX_SIGNED) {
            result = CKR_DATA_LEN_RANGE;
            struct signing_key key;
            ck_mechanism_type_t mechanism;
            struct tk_buffer dropped;
            end_signing(session, &key, &mechanism, &dropped);
            tk_buffer_free(&dropped);
        }
    }
    pthread_mutex_unlock(&lock);
    return result;
}

ck_rv_t C_SignFinal(ck_session_handle_t handle, unsigned char *signature, unsigned long *signature_len) {
    if (!initialized) return CKR_CRYPTOKI_NOT_INITIALIZED;
    if (!signature_len) return CKR_ARGUMENTS_BAD;
    struct signing_key key;
    ck_mechanism_type_t mechanism;
    struct tk_buffer data = {0};
    int taken;
    ck_rv_t result = take_signing(handle, signature, signature_len, &key, &mechanism, &data, &taken);
    if (taken) result = sign(&key, mechanism, data.bytes, data.count, signature, signature_len);
    tk_buffer_free(&data);
    return result;
}

// MARK: Random numbers

/// From the kernel's random number generator, which the kernel feeds from the TPM's (tpm-rng)
/// where it has one: asking the TPM through the agent for each call would add a round trip and
/// nothing a caller can rely on.
ck_rv_t C_GenerateRandom(ck_session_handle_t handle, unsigned char *random_data, unsigned long random_len) {
    if (!initialized) return CKR_CRYPTOKI_NOT_INITIALIZED;
    if (!random_data && random_len) return CKR_ARGUMENTS_BAD;
    pthread_mutex_lock(&lock);
    int valid = session_for(handle) != NULL;
    pthread_mutex_unlock(&lock);
    if (!valid) return CKR_SESSION_HANDLE_INVALID;
    while (random_len > 0) {
        ssize_t got = getrandom(random_data, random_len, 0);
        if (got < 0) {
            if (errno == EINTR) continue;
            return CKR_FUNCTION_FAILED;
        }
        random_data += got;
        random_len -= (unsigned long)got;
    }
    return CKR_OK;
}

// The module's shared declarations. It is C, and talks to the user's ssh agent
// (tpm-keychain-ssh-agent) over its socket: see docs/ARCHITECTURE.md, "The PKCS#11 module".
#ifndef TK_PKCS11_MODULE_H
#define TK_PKCS11_MODULE_H

// The GNU names (ck_rv_t, struct ck_info): the header declares every function with them.
#define CRYPTOKI_GNU 1
#include <p11-kit-1/p11-kit/pkcs11.h>
#include <stddef.h>
#include <stdint.h>

extern struct ck_function_list tk_function_list;

/// One key the agent offers: its public point (X9.63, 65 bytes) and its label.
struct tk_identity {
    unsigned char point[65];
    char label[256];
};

#define TK_MAX_IDENTITIES 64
#define TK_MAX_SLOTS 8
#define TK_SOCKET_PATH 108 /* sizeof(struct sockaddr_un.sun_path) */

/// A certificate of one of the agent's keys (an identity): its DER and the fields PKCS#11's
/// certificate objects carry, each allocated; `point` names the key.
struct tk_certificate {
    unsigned char point[65];
    unsigned char *der, *subject, *issuer, *serial;
    size_t der_count, subject_count, issuer_count;
    /// The serial number as DER: an INTEGER's tag, length and content (CKA_SERIAL_NUMBER).
    size_t serial_count;
};

/// A buffer that grows; `failed` once an allocation failed or a limit was passed.
struct tk_buffer {
    unsigned char *bytes;
    size_t count;
    size_t capacity;
    int failed;
};

void tk_buffer_append(struct tk_buffer *buffer, const void *bytes, size_t count);
void tk_buffer_uint32(struct tk_buffer *buffer, uint32_t value);
void tk_buffer_string(struct tk_buffer *buffer, const void *bytes, size_t count);
void tk_buffer_free(struct tk_buffer *buffer);

/// The agents' sockets, one per store (a slot each): TPM_KEYCHAIN_AGENT_SOCK, several separated
/// by ':', else $XDG_RUNTIME_DIR/tpm-keychain/ssh-agent.socket. Returns how many (at least 1).
int tk_agent_sockets(char sockets[][TK_SOCKET_PATH], int capacity);

/// The name of the store the agent at `socket` serves (its directory's name), into `name`:
/// 0, or -1 when the agent cannot be reached or answered something else.
int tk_agent_store_name(const char *socket, char *name, size_t capacity);

/// The identities that are P-256 keys of the agent at `socket`: how many (at most `capacity`),
/// or -1 when the agent cannot be reached or answered something else.
int tk_agent_identities(const char *socket, struct tk_identity *identities, int capacity);

/// The certificates of the agent's keys (at most `capacity`): how many, or -1 when the agent
/// cannot be reached or answered something else. Free each with tk_certificate_free.
int tk_agent_certificates(const char *socket, struct tk_certificate *certificates, int capacity);
void tk_certificate_free(struct tk_certificate *certificate);

/// Asks the agent for a signature by `identity`: over SHA-256(data) when `prehashed` is 0,
/// over the 32-byte digest `data` when it is 1. Writes r ‖ s (64 bytes) to `signature`.
/// Returns CKR_OK, CKR_DEVICE_ERROR (no agent) or CKR_FUNCTION_FAILED (refused).
ck_rv_t tk_agent_sign(const char *socket, const struct tk_identity *identity, const unsigned char *data, size_t count,
                      int prehashed, unsigned char signature[64]);

#endif

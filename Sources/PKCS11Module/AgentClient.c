// The module's only way to a key: the user's ssh agent (tpm-keychain-ssh-agent), over its Unix
// socket, one connection per request. The agent decides each use for this process (it reads our
// uid and executable from the socket) and has the TPM sign; the module holds no key and no
// keychain code, so a process that loads it takes on neither the Swift runtime nor the TPM stack.
#include "Module.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define TK_MAXIMUM_ANSWER (256 * 1024)

static const char algorithm[] = "ecdsa-sha2-nistp256";
static const char curve[] = "nistp256";

void tk_buffer_append(struct tk_buffer *buffer, const void *bytes, size_t count) {
    if (buffer->failed) return;
    if (buffer->count + count > TK_MAXIMUM_ANSWER) {
        buffer->failed = 1;
        return;
    }
    if (buffer->count + count > buffer->capacity) {
        size_t capacity = (buffer->count + count) * 2;
        unsigned char *grown = realloc(buffer->bytes, capacity);
        if (!grown) {
            buffer->failed = 1;
            return;
        }
        buffer->bytes = grown;
        buffer->capacity = capacity;
    }
    if (count) memcpy(buffer->bytes + buffer->count, bytes, count);
    buffer->count += count;
}

void tk_buffer_uint32(struct tk_buffer *buffer, uint32_t value) {
    unsigned char bytes[4] = {value >> 24, value >> 16, value >> 8, value};
    tk_buffer_append(buffer, bytes, 4);
}

void tk_buffer_string(struct tk_buffer *buffer, const void *bytes, size_t count) {
    tk_buffer_uint32(buffer, (uint32_t)count);
    tk_buffer_append(buffer, bytes, count);
}

void tk_buffer_free(struct tk_buffer *buffer) {
    free(buffer->bytes);
    memset(buffer, 0, sizeof *buffer);
}

/// A reader over an answer: every length is checked against what is left before it is used.
struct reader {
    const unsigned char *bytes;
    size_t count;
    size_t offset;
    int failed;
};

static uint32_t read_uint32(struct reader *reader) {
    if (reader->failed || reader->count - reader->offset < 4) {
        reader->failed = 1;
        return 0;
    }
    const unsigned char *p = reader->bytes + reader->offset;
    reader->offset += 4;
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static const unsigned char *read_string(struct reader *reader, size_t *count) {
    uint32_t length = read_uint32(reader);
    if (reader->failed || length > reader->count - reader->offset) {
        reader->failed = 1;
        *count = 0;
        return NULL;
    }
    const unsigned char *start = reader->bytes + reader->offset;
    reader->offset += length;
    *count = length;
    return start;
}

static int equals(const unsigned char *bytes, size_t count, const char *text) {
    return bytes && count == strlen(text) && memcmp(bytes, text, count) == 0;
}

int tk_agent_sockets(char sockets[][TK_SOCKET_PATH], int capacity) {
    const char *explicit = getenv("TPM_KEYCHAIN_AGENT_SOCK");
    int count = 0;
    if (explicit && explicit[0]) {
        // Several agents (one per store), separated by ':' as in PATH; only absolute paths.
        const char *start = explicit;
        while (*start && count < capacity) {
            const char *end = strchr(start, ':');
            size_t length = end ? (size_t)(end - start) : strlen(start);
            if (length > 0 && length < TK_SOCKET_PATH && start[0] == '/') {
                memcpy(sockets[count], start, length);
                sockets[count][length] = 0;
                count++;
            }
            if (!end) break;
            start = end + 1;
        }
        if (count > 0) return count;
    }
    const char *runtime = getenv("XDG_RUNTIME_DIR");
    snprintf(sockets[0], TK_SOCKET_PATH, "%s/tpm-keychain/ssh-agent.socket",
             runtime && runtime[0] == '/' ? runtime : "/nonexistent");
    return 1;
}

static int write_all(int descriptor, const unsigned char *bytes, size_t count) {
    while (count > 0) {
        ssize_t written = send(descriptor, bytes, count, MSG_NOSIGNAL);
        if (written < 0 && errno == EINTR) continue;
        if (written <= 0) return -1;
        bytes += written;
        count -= (size_t)written;
    }
    return 0;
}

static int read_all(int descriptor, unsigned char *bytes, size_t count) {
    while (count > 0) {
        ssize_t got = read(descriptor, bytes, count);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return -1;
        bytes += got;
        count -= (size_t)got;
    }
    return 0;
}

/// Sends `request` (a message body) to the agent at `path` and reads the answer's body into
/// `answer`. Returns 0, or -1 when the agent cannot be reached or hangs up.
static int ask(const char *path, const struct tk_buffer *request, struct tk_buffer *answer) {
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof address.sun_path) return -1;
    memcpy(address.sun_path, path, strlen(path) + 1);
    int descriptor = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (descriptor < 0) return -1;
    int result = -1;
    unsigned char prefix[4] = {request->count >> 24, request->count >> 16, request->count >> 8, request->count};
    if (connect(descriptor, (struct sockaddr *)&address, sizeof address) == 0 && !request->failed &&
        write_all(descriptor, prefix, 4) == 0 && write_all(descriptor, request->bytes, request->count) == 0 &&
        read_all(descriptor, prefix, 4) == 0) {
        uint32_t length = (uint32_t)prefix[0] << 24 | (uint32_t)prefix[1] << 16 | (uint32_t)prefix[2] << 8 | prefix[3];
        if (length > 0 && length <= TK_MAXIMUM_ANSWER) {
            unsigned char *bytes = malloc(length);
            if (bytes && read_all(descriptor, bytes, length) == 0) {
                tk_buffer_append(answer, bytes, length);
                result = answer->failed ? -1 : 0;
            }
            free(bytes);
        }
    }
    close(descriptor);
    return result;
}

/// Starts an SSH_AGENTC_EXTENSION request for the extension `name`; its fields follow.
static void extension_request(struct tk_buffer *request, const char *name) {
    unsigned char type = 27;  // SSH_AGENTC_EXTENSION
    tk_buffer_append(request, &type, 1);
    tk_buffer_string(request, name, strlen(name));
}

static void append_blob(struct tk_buffer *buffer, const struct tk_identity *identity) {
    struct tk_buffer blob = {0};
    tk_buffer_string(&blob, algorithm, strlen(algorithm));
    tk_buffer_string(&blob, curve, strlen(curve));
    tk_buffer_string(&blob, identity->point, sizeof identity->point);
    if (blob.failed) buffer->failed = 1;
    tk_buffer_string(buffer, blob.bytes, blob.count);
    tk_buffer_free(&blob);
}

/// The point of an ecdsa-sha2-nistp256 key blob, or NULL for any other blob.
static const unsigned char *p256_point(const unsigned char *blob, size_t blob_count) {
    struct reader key = {blob, blob_count, 0, 0};
    size_t name_count, curve_count, point_count;
    const unsigned char *name = read_string(&key, &name_count);
    const unsigned char *curve_name = read_string(&key, &curve_count);
    const unsigned char *point = read_string(&key, &point_count);
    if (key.failed || key.offset != blob_count || !equals(name, name_count, algorithm) ||
        !equals(curve_name, curve_count, curve) || point_count != 65 || point[0] != 4)
        return NULL;
    return point;
}

int tk_agent_identities(const char *socket, struct tk_identity *identities, int capacity) {
    struct tk_buffer request = {0}, answer = {0};
    unsigned char type = 11;  // SSH_AGENTC_REQUEST_IDENTITIES
    tk_buffer_append(&request, &type, 1);
    int found = -1;
    if (ask(socket, &request, &answer) == 0 && answer.count >= 1 && answer.bytes[0] == 12) {
        struct reader reader = {answer.bytes, answer.count, 1, 0};
        uint32_t count = read_uint32(&reader);
        found = 0;
        for (uint32_t index = 0; index < count && !reader.failed; index++) {
            size_t blob_count, comment_count;
            const unsigned char *blob = read_string(&reader, &blob_count);
            const unsigned char *comment = read_string(&reader, &comment_count);
            if (reader.failed) break;
            const unsigned char *point = p256_point(blob, blob_count);
            // Only P-256 keys: the keychain makes no other in the TPM.
            if (!point || found == capacity) continue;
            memcpy(identities[found].point, point, 65);
            size_t label_count = comment_count < sizeof identities[found].label - 1 ? comment_count
                                                                                    : sizeof identities[found].label - 1;
            memcpy(identities[found].label, comment, label_count);
            identities[found].label[label_count] = 0;
            found++;
        }
        if (reader.failed) found = -1;
    }
    tk_buffer_free(&request);
    tk_buffer_free(&answer);
    return found;
}

static unsigned char *copy(const unsigned char *bytes, size_t count) {
    unsigned char *copied = malloc(count ? count : 1);
    if (copied && count) memcpy(copied, bytes, count);
    return copied;
}

void tk_certificate_free(struct tk_certificate *certificate) {
    free(certificate->der);
    free(certificate->subject);
    free(certificate->issuer);
    free(certificate->serial);
    memset(certificate, 0, sizeof *certificate);
}

int tk_agent_certificates(const char *socket, struct tk_certificate *certificates, int capacity) {
    struct tk_buffer request = {0}, answer = {0};
    extension_request(&request, "certificates@tpm-keychain");
    int found = -1;
    if (ask(socket, &request, &answer) == 0 && answer.count >= 1 && answer.bytes[0] == 6) {
        struct reader reader = {answer.bytes, answer.count, 1, 0};
        uint32_t count = read_uint32(&reader);
        found = 0;
        for (uint32_t index = 0; index < count && !reader.failed; index++) {
            size_t blob_count, der_count, subject_count, issuer_count, serial_count;
            const unsigned char *blob = read_string(&reader, &blob_count);
            const unsigned char *der = read_string(&reader, &der_count);
            const unsigned char *subject = read_string(&reader, &subject_count);
            const unsigned char *issuer = read_string(&reader, &issuer_count);
            const unsigned char *serial = read_string(&reader, &serial_count);
            if (reader.failed) break;
            const unsigned char *point = p256_point(blob, blob_count);
            // A serial number is at most 20 octets (RFC 5280), so its DER length is one byte.
            if (!point || der_count == 0 || serial_count == 0 || serial_count > 126 || found == capacity) continue;
            struct tk_certificate *certificate = &certificates[found];
            memset(certificate, 0, sizeof *certificate);
            memcpy(certificate->point, point, 65);
            certificate->der = copy(der, der_count);
            certificate->subject = copy(subject, subject_count);
            certificate->issuer = copy(issuer, issuer_count);
            certificate->serial = malloc(serial_count + 2);
            if (!certificate->der || !certificate->subject || !certificate->issuer || !certificate->serial) {
                tk_certificate_free(certificate);
                continue;
            }
            certificate->serial[0] = 0x02;
            certificate->serial[1] = (unsigned char)serial_count;
            memcpy(certificate->serial + 2, serial, serial_count);
            certificate->der_count = der_count;
            certificate->subject_count = subject_count;
            certificate->issuer_count = issuer_count;
            certificate->serial_count = serial_count + 2;
            found++;
        }
        if (reader.failed) {
            for (int index = 0; index < found; index++) tk_certificate_free(&certificates[index]);
            found = -1;
        }
    }
    tk_buffer_free(&request);
    tk_buffer_free(&answer);
    return found;
}

/// An mpint of at most 32 bytes (after a leading zero), left-padded into `out`.
static int integer(struct reader *reader, unsigned char out[32]) {
    size_t count;
    const unsigned char *bytes = read_string(reader, &count);
    if (reader->failed) return -1;
    while (count > 0 && bytes[0] == 0) {
        bytes++;
        count--;
    }
    if (count > 32) return -1;
    memset(out, 0, 32);
    memcpy(out + 32 - count, bytes, count);
    return 0;
}

ck_rv_t tk_agent_sign(const char *socket, const struct tk_identity *identity, const unsigned char *data, size_t count,
                      int prehashed, unsigned char signature[64]) {
    struct tk_buffer request = {0}, answer = {0};
    if (prehashed) {
        extension_request(&request, "sign-digest@tpm-keychain");
        append_blob(&request, identity);
        tk_buffer_string(&request, data, count);
    } else {
        unsigned char type = 13;  // SSH_AGENTC_SIGN_REQUEST
        tk_buffer_append(&request, &type, 1);
        append_blob(&request, identity);
        tk_buffer_string(&request, data, count);
        tk_buffer_uint32(&request, 0);
    }
    ck_rv_t result = CKR_DEVICE_ERROR;
    if (ask(socket, &request, &answer) == 0) {
        result = CKR_FUNCTION_FAILED;
        // A signature: SSH_AGENT_SIGN_RESPONSE, or the extension's SSH_AGENT_SUCCESS with it.
        if (answer.count >= 1 && answer.bytes[0] == (prehashed ? 6 : 14)) {
            struct reader reader = {answer.bytes, answer.count, 1, 0};
            size_t blob_count;
            const unsigned char *blob = read_string(&reader, &blob_count);
            struct reader signature_reader = {blob, blob_count, 0, 0};
            size_t name_count, inner_count;
            const unsigned char *name = read_string(&signature_reader, &name_count);
            const unsigned char *inner = read_string(&signature_reader, &inner_count);
            struct reader integers = {inner, inner_count, 0, 0};
            if (!reader.failed && !signature_reader.failed && equals(name, name_count, algorithm) &&
                integer(&integers, signature) == 0 && integer(&integers, signature + 32) == 0 &&
                integers.offset == inner_count)
                result = CKR_OK;
        }
    }
    tk_buffer_free(&request);
    tk_buffer_free(&answer);
    return result;
}

int tk_agent_store_name(const char *socket, char *name, size_t capacity) {
    struct tk_buffer request = {0}, answer = {0};
    extension_request(&request, "store@tpm-keychain");
    int result = -1;
    if (ask(socket, &request, &answer) == 0 && answer.count >= 1 && answer.bytes[0] == 6) {
        struct reader reader = {answer.bytes, answer.count, 1, 0};
        size_t count;
        const unsigned char *text = read_string(&reader, &count);
        if (!reader.failed && reader.offset == answer.count && count > 0 && count < capacity) {
            memcpy(name, text, count);
            name[count] = 0;
            result = 0;
        }
    }
    tk_buffer_free(&request);
    tk_buffer_free(&answer);
    return result;
}

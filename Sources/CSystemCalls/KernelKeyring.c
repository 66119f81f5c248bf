#include "CSystemCalls.h"

#include <errno.h>
#include <linux/keyctl.h>
#include <sys/syscall.h>
#include <unistd.h>

// keyutils.h's permission bits (not in the kernel's uapi headers).
#define TK_KEY_POS_ALL 0x3f000000u
#define TK_KEY_USR_VIEW 0x00010000u
#define TK_KEY_USR_READ 0x00020000u
#define TK_KEY_USR_SEARCH 0x00080000u

static long tk_search(const char *description) {
    return syscall(SYS_keyctl, KEYCTL_SEARCH, KEY_SPEC_USER_KEYRING, "user", description, 0);
}

long tk_user_keyring_store(const char *description, const void *payload, size_t length, unsigned timeout_seconds) {
    long key = syscall(SYS_add_key, "user", description, payload, length, KEY_SPEC_USER_KEYRING);
    if (key < 0) return -1;
    // The default grants other processes of the user only "view" unless they possess the key
    // through their session keyring, which services and cron jobs do not: read and search too,
    // and nothing to other users.
    unsigned permissions = TK_KEY_POS_ALL | TK_KEY_USR_VIEW | TK_KEY_USR_READ | TK_KEY_USR_SEARCH;
    if (syscall(SYS_keyctl, KEYCTL_SETPERM, key, permissions) < 0 ||
        syscall(SYS_keyctl, KEYCTL_SET_TIMEOUT, key, timeout_seconds) < 0) {
        int saved = errno;
        syscall(SYS_keyctl, KEYCTL_INVALIDATE, key);
        errno = saved;
        return -1;
    }
    return key;
}

long tk_user_keyring_read(const char *description, void *buffer, size_t capacity) {
    long key = tk_search(description);
    if (key < 0) return -1;
    return syscall(SYS_keyctl, KEYCTL_READ, key, buffer, capacity);
}

long tk_user_keyring_remove(const char *description) {
    long key = tk_search(description);
    if (key < 0) return -1;
    return syscall(SYS_keyctl, KEYCTL_INVALIDATE, key);
}

// The libc and kernel calls Swift cannot make itself (variadic syscall(2), functions Glibc's
// module does not export), for SystemCalls and Secrets only (no other target imports this
// module). Each returns -1 with errno set on failure unless it says otherwise.
#ifndef TPMKEYCHAIN_CSYSTEMCALLS_H
#define TPMKEYCHAIN_CSYSTEMCALLS_H

#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE 1 /* explicit_bzero */
#endif
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/types.h>

/// Zeroes memory in a way the optimizer may not remove (secrets, C buffers from ESAPI).
static inline void tk_secure_zero(void *pointer, size_t count) {
    if (pointer != NULL && count > 0) {
        explicit_bzero(pointer, count);
    }
}

/// pipe2(2) with O_CLOEXEC: both ends close on exec, atomically, so a child another thread spawns
/// meanwhile never inherits them.
int tk_pipe_cloexec(int fds[2]);

/// getrandom(2) without flags.
static inline ssize_t tk_getrandom(void *buffer, size_t count) {
    return getrandom(buffer, count, 0);
}

/// No core dump for this process: RLIMIT_CORE 0 (soft and hard) for ordinary dumps, and not
/// dumpable, which also stops core_pattern pipes (systemd-coredump) and same-user ptrace.
/// Returns 0 when both took effect.
static inline int tk_disable_core_dumps(void) {
    struct rlimit none = { 0, 0 };
    int limit = setrlimit(RLIMIT_CORE, &none);
    int dumpable = prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    return (limit == 0 && dumpable == 0) ? 0 : -1;
}

/// Leaves whole pages out of any core dump (MADV_DONTDUMP); `pointer` must be page-aligned.
static inline int tk_exclude_from_core_dumps(void *pointer, size_t count) {
    return madvise(pointer, count, MADV_DONTDUMP);
}

/// Adds (or replaces) a "user" key named `description` holding `payload` to the user keyring
/// (@u), readable by this user's processes and nobody else's, expiring after `timeout_seconds`.
/// Returns the key's serial number.
long tk_user_keyring_store(const char *description, const void *payload, size_t length, unsigned timeout_seconds);

/// Reads the "user" key named `description` from the user keyring into `buffer`. Returns the
/// payload's length (which may exceed `capacity`: then only `capacity` bytes were copied).
long tk_user_keyring_read(const char *description, void *buffer, size_t capacity);

/// Removes the "user" key named `description` from the user keyring (invalidates it).
long tk_user_keyring_remove(const char *description);

/// pidfd_open(2): a descriptor that refers to process `pid` itself, not to whatever later
/// takes its number (close-on-exec).
int tk_pidfd_open(pid_t pid);

/// The pidfd of the peer of a connected Unix socket, taken by the kernel when it connected
/// (SO_PEERPIDFD, Linux 6.5): no race with the peer's exit and its pid's reuse.
int tk_peer_pidfd(int socket);

/// 0 when the process `pidfd` refers to is still running (pidfd_send_signal(2) of signal 0).
int tk_pidfd_check_alive(int pidfd);

/// The number the kernel gives the process `pidfd` refers to and never gives another while it
/// runs: the pidfd's inode on pidfs (Linux 6.9), or 0 where pidfds share one anonymous inode.
unsigned long long tk_pidfd_process_id(int pidfd);

#endif

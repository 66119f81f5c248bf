// The tpm2-tss headers TPMKeychain's TPM layer uses, plus the few helpers that
// C does better than Swift. Only the TPM target imports this module.
#ifndef TPMKEYCHAIN_CTSS2_SHIM_H
#define TPMKEYCHAIN_CTSS2_SHIM_H

#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE 1 /* explicit_bzero */
#endif
#include <string.h>
#include <sys/types.h>
#include <sys/random.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <tss2/tss2_common.h>
#include <tss2/tss2_tpm2_types.h>
#include <tss2/tss2_esys.h>
#include <tss2/tss2_sys.h>
#include <tss2/tss2_tctildr.h>
#include <tss2/tss2_tcti.h>
#include <fcntl.h>
#include <tss2/tss2_mu.h>
#include <tss2/tss2_rc.h>

/// Zeroes memory in a way the optimizer may not remove (secrets, C buffers from ESAPI).
static inline void ctss2_secure_zero(void *pointer, size_t count) {
    if (pointer != NULL && count > 0) {
        explicit_bzero(pointer, count);
    }
}

/// getrandom(2), which Swift's Glibc module does not export.
static inline ssize_t ctss2_getrandom(void *buffer, size_t count) {
    return getrandom(buffer, count, 0);
}

/// No core dump for this process: RLIMIT_CORE 0 (soft and hard) for ordinary dumps, and not
/// dumpable, which also stops core_pattern pipes (systemd-coredump) and same-user ptrace.
/// Returns 0 when both took effect.
static inline int ctss2_disable_core_dumps(void) {
    struct rlimit none = { 0, 0 };
    int limit = setrlimit(RLIMIT_CORE, &none);
    int dumpable = prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    return (limit == 0 && dumpable == 0) ? 0 : -1;
}

/// Marks the descriptors a TCTI keeps open close-on-exec, and returns how many it marked. The
/// device TCTI opens /dev/tpmrm0 without O_CLOEXEC, so a child that this process (or a host
/// application) starts would otherwise keep the connection, and with it what the resource
/// manager holds loaded for it. The swtpm TCTI keeps nothing open between commands (none).
static inline size_t ctss2_tcti_mark_close_on_exec(TSS2_TCTI_CONTEXT *tcti) {
    TSS2_TCTI_POLL_HANDLE handles[4];
    size_t count = 4;
    if (Tss2_Tcti_GetPollHandles(tcti, handles, &count) != TSS2_RC_SUCCESS) return 0;
    size_t marked = 0;
    for (size_t index = 0; index < count && index < 4; index++) {
        int flags = fcntl(handles[index].fd, F_GETFD);
        if (flags >= 0 && fcntl(handles[index].fd, F_SETFD, flags | FD_CLOEXEC) == 0) marked++;
    }
    return marked;
}

/// Leaves whole pages out of any core dump (MADV_DONTDUMP); `pointer` must be page-aligned.
static inline int ctss2_exclude_from_core_dumps(void *pointer, size_t count) {
    return madvise(pointer, count, MADV_DONTDUMP);
}

#endif

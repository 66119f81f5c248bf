// The tpm2-tss headers TPMKeychain's TPM layer uses, plus a helper that C does better than
// Swift (zeroizing and randomness are CSystemCalls'). Only the TPM target imports this module.
#ifndef TPMKEYCHAIN_CTSS2_SHIM_H
#define TPMKEYCHAIN_CTSS2_SHIM_H

#include <sys/types.h>
#include <tss2/tss2_common.h>
#include <tss2/tss2_tpm2_types.h>
#include <tss2/tss2_esys.h>
#include <tss2/tss2_sys.h>
#include <tss2/tss2_tctildr.h>
#include <tss2/tss2_tcti.h>
#include <fcntl.h>
#include <tss2/tss2_mu.h>
#include <tss2/tss2_rc.h>

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

#endif

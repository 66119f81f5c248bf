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
#include <tss2/tss2_common.h>
#include <tss2/tss2_tpm2_types.h>
#include <tss2/tss2_esys.h>
#include <tss2/tss2_sys.h>
#include <tss2/tss2_tctildr.h>
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

#endif

#define _GNU_SOURCE 1 /* pipe2, which Swift's Glibc module does not export */
#include "CSystemCalls.h"

#include <fcntl.h>
#include <unistd.h>

int tk_pipe_cloexec(int fds[2]) {
    return pipe2(fds, O_CLOEXEC);
}

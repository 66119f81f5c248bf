// Process descriptors (pidfd), which Glibc's module does not export: reached through syscall(2).
#include "CSystemCalls.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif
#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

int tk_pidfd_open(pid_t pid) {
    // pidfds are close-on-exec whatever the flags.
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

int tk_peer_pidfd(int socket) {
    int pidfd = -1;
    socklen_t length = sizeof pidfd;
    if (getsockopt(socket, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &length) != 0) return -1;
    return pidfd;
}

int tk_pidfd_check_alive(int pidfd) {
    return (int)syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0);
}

#ifndef PIDFS_MAGIC
#define PIDFS_MAGIC 0x50494446
#endif

unsigned long long tk_pidfd_process_id(int pidfd) {
    struct statfs filesystem;
    struct stat status;
    // Before pidfs, every pidfd was the same anon_inode: its inode names no process.
    if (fstatfs(pidfd, &filesystem) != 0 || (unsigned long)filesystem.f_type != PIDFS_MAGIC) return 0;
    if (fstat(pidfd, &status) != 0) return 0;
    return (unsigned long long)status.st_ino;
}

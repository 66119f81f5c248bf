/*
 * pam_tpm_keychain.so: unlocks the user's TPMKeychain with the login password once PAM has
 * accepted it, and locks it when the user's last session closes, by running
 * `tpm-keychain pam-hook` as the user (README.md, "Unlock with your login").
 *
 *   auth     optional  pam_tpm_keychain.so [debug] [timeout=SECONDS] [log=FILE] [COMMAND...]
 *   session  optional  pam_tpm_keychain.so [debug] [timeout=SECONDS] [log=FILE] [COMMAND...]
 *
 * COMMAND is the first argument that starts with '/' and everything after it (default:
 * /usr/local/bin/tpm-keychain pam-hook). timeout= bounds each run of it (default 10 s); log=
 * appends its output to FILE, opened as the user (default: /dev/null); debug says in syslog
 * what the module did, never what the password is.
 *
 * Why the password waits for the session: the auth stack hands a module every password typed,
 * also one the password module before it has just rejected, on the many stacks that go on after
 * a failure (`auth required pam_unix.so`, Fedora's substacks, su, sshd's password attempts).
 * Unlocking there would spend one of the TPM's dictionary-attack tries per wrong password, typed
 * by anyone. So pam_sm_authenticate only keeps PAM_AUTHTOK in the handle's module data, and the
 * hook sees it at open_session, which an application calls only after pam_authenticate has
 * succeeded, or at pam_setcred(PAM_REINITIALIZE_CRED or PAM_REFRESH_CRED), which is how a
 * screen locker reports a successful re-authentication (it opens no session). gnome-keyring's
 * pam_gnome_keyring does the same.
 *
 * The module never decides anything: authenticate and setcred return PAM_IGNORE and the session
 * functions PAM_SUCCESS whatever the hook does, and the hook runs for at most timeout= seconds,
 * so a login is never refused or held for the keychain's sake. It never prompts either: it reads
 * PAM_AUTHTOK with pam_get_item only, so a fingerprint or smartcard login is asked nothing.
 *
 * Build (Scripts/install-pam-module.sh):
 *   cc -shared -fPIC -O2 -Wall -Wextra -Werror -o pam_tpm_keychain.so pam_tpm_keychain.c -lpam
 */

#define _GNU_SOURCE

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include <security/pam_ext.h>
#include <security/pam_modules.h>
#include <security/pam_modutil.h>

enum {
    /* The longest password kept, as the hook reads at most this much. A longer one is not
     * passed on at all: cut short it would be a wrong passcode, and cost a try. */
    TOKEN_MAX = 4096,
    DEFAULT_TIMEOUT = 10,
    MAX_TIMEOUT = 3600,
};
_Static_assert(TOKEN_MAX <= PIPE_BUF, "the password is written to the hook's pipe in one atomic write");

/* The module data name of the stash (pam_set_data); one per PAM handle. */
static const char STASH_NAME[] = "pam_tpm_keychain_authtok";

static char *const DEFAULT_COMMAND[] = {"/usr/local/bin/tpm-keychain", "pam-hook", NULL};

/* The arguments of the module's line in /etc/pam.d/<service>. */
struct options {
    bool debug;
    unsigned timeout;
    const char *log;
    char *const *command;
    char **allocated_command; /* what free_options frees, when command is not the default */
};

/* Parses argv; unknown options are reported and skipped, since a mistyped option must not cost
 * a user their login. False only when memory runs out. */
static bool parse_options(pam_handle_t *pamh, int argc, const char **argv, struct options *options) {
    *options = (struct options){.timeout = DEFAULT_TIMEOUT, .command = DEFAULT_COMMAND};
    for (int index = 0; index < argc; index++) {
        const char *argument = argv[index];
        if (argument[0] == '/') {
            char **command = calloc((size_t)(argc - index) + 1, sizeof *command);
            if (command == NULL) {
                pam_syslog(pamh, LOG_CRIT, "out of memory");
                return false;
            }
            for (int word = index; word < argc; word++)
                command[word - index] = (char *)argv[word];
            options->command = options->allocated_command = command;
            break;
        } else if (strcmp(argument, "debug") == 0) {
            options->debug = true;
        } else if (strncmp(argument, "timeout=", 8) == 0) {
            char *end = NULL;
            errno = 0;
            unsigned long seconds = strtoul(argument + 8, &end, 10);
            if (errno != 0 || end == argument + 8 || *end != '\0' || seconds == 0 || seconds > MAX_TIMEOUT)
                pam_syslog(pamh, LOG_ERR, "%s: not a number of seconds from 1 to %d; using %u",
                           argument, MAX_TIMEOUT, options->timeout);
            else
                options->timeout = (unsigned)seconds;
        } else if (strncmp(argument, "log=", 4) == 0) {
            if (argument[4] == '/')
                options->log = argument + 4;
            else
                pam_syslog(pamh, LOG_ERR, "%s: not an absolute path; ignored", argument);
        } else {
            pam_syslog(pamh, LOG_ERR, "unknown option, ignored: %s", argument);
        }
    }
    return true;
}

static void free_options(struct options *options) {
    free(options->allocated_command);
    options->allocated_command = NULL;
}

/* ---- The stash: the accepted password, kept from auth to the session ---- */

/* One anonymous mapping, locked in memory (never written to swap) and left out of core dumps,
 * holding the password and the user it was typed for. A mapping of its own, rather than malloc,
 * because munlock works on whole pages: unlocking a malloc'd block could unlock a neighbour's
 * secret that shares its page. */
struct stash {
    size_t mapped; /* bytes mapped: what the cleanup zeroizes and unmaps */
    size_t length; /* of token */
    char user[LOGIN_NAME_MAX];
    char token[TOKEN_MAX];
};

/* The cleanup PAM calls when the stash is replaced (pam_set_data) or the handle ends (pam_end). */
static void stash_cleanup(pam_handle_t *pamh, void *data, int status) {
    (void)pamh;
    (void)status;
    struct stash *stash = data;
    if (stash == NULL)
        return;
    size_t mapped = stash->mapped;
    explicit_bzero(stash, mapped);
    munlock(stash, mapped);
    munmap(stash, mapped);
}

/* Forgets the stash, zeroizing it: replacing module data runs the old data's cleanup. */
static void stash_drop(pam_handle_t *pamh) {
    (void)pam_set_data(pamh, STASH_NAME, NULL, NULL);
}

/* Keeps PAM_AUTHTOK, when a module before this one set it, for the user PAM_USER names. */
static void stash_keep(pam_handle_t *pamh, const struct options *options) {
    const void *item = NULL;
    if (pam_get_item(pamh, PAM_AUTHTOK, &item) != PAM_SUCCESS || item == NULL || *(const char *)item == '\0') {
        if (options->debug)
            pam_syslog(pamh, LOG_DEBUG, "auth: no password to keep");
        return;
    }
    const char *token = item;
    size_t length = strnlen(token, TOKEN_MAX + 1);
    if (length > TOKEN_MAX) {
        if (options->debug)
            pam_syslog(pamh, LOG_DEBUG, "auth: the password is longer than %d bytes; not kept", TOKEN_MAX);
        return;
    }
    const void *user = NULL;
    if (pam_get_item(pamh, PAM_USER, &user) != PAM_SUCCESS || user == NULL || *(const char *)user == '\0'
        || strnlen(user, LOGIN_NAME_MAX) >= LOGIN_NAME_MAX)
        return;

    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0)
        return;
    size_t mapped = (sizeof(struct stash) + (size_t)page - 1) / (size_t)page * (size_t)page;
    struct stash *stash = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (stash == MAP_FAILED) {
        pam_syslog(pamh, LOG_ERR, "auth: cannot keep the password: mmap: %m");
        return;
    }
    /* Locked before the password is written, so it never reaches swap. A process with a small
     * RLIMIT_MEMLOCK (an unprivileged screen locker) may be refused; the password is kept anyway. */
    if (mlock(stash, mapped) != 0 && options->debug)
        pam_syslog(pamh, LOG_DEBUG, "auth: the password is kept in memory that could not be locked: %m");
    (void)madvise(stash, mapped, MADV_DONTDUMP);
    stash->mapped = mapped;
    stash->length = length;
    memcpy(stash->user, user, strlen(user) + 1);
    memcpy(stash->token, token, length);
    if (pam_set_data(pamh, STASH_NAME, stash, stash_cleanup) != PAM_SUCCESS) {
        stash_cleanup(pamh, stash, 0);
        pam_syslog(pamh, LOG_ERR, "auth: cannot keep the password: pam_set_data failed");
        return;
    }
    if (options->debug)
        pam_syslog(pamh, LOG_DEBUG, "auth: kept the password until the session opens");
}

/* The stash, when there is one for the user PAM_USER names now. An application may change
 * PAM_USER after authenticating (a password checked for one user, a session opened for
 * another); that user's keychain must never be tried with the first one's password. */
static const struct stash *stash_find(pam_handle_t *pamh, const struct options *options) {
    const void *data = NULL;
    if (pam_get_data(pamh, STASH_NAME, &data) != PAM_SUCCESS || data == NULL)
        return NULL;
    const struct stash *stash = data;
    const void *user = NULL;
    if (pam_get_item(pamh, PAM_USER, &user) != PAM_SUCCESS || user == NULL || strcmp(user, stash->user) != 0) {
        if (options->debug)
            pam_syslog(pamh, LOG_DEBUG, "the password was given for another user; not passed on");
        return NULL;
    }
    return stash;
}

/* ---- Running the hook ---- */

/* Everything the child needs, prepared before fork: after fork the child calls only
 * async-signal-safe functions (below). */
struct launch {
    char *const *argv;
    char *const *environment;
    const char *log;
    int input;        /* read end of the pipe holding the password, or -1 for /dev/null */
    bool switch_user; /* false when this process already is the user */
    uid_t uid;
    gid_t gid;
    const gid_t *groups;
    size_t group_count;
};

/* Closes every descriptor from `first` on, so that the hook inherits nothing of the host's
 * (sockets of a display manager, sshd's connection, another module's files). */
static void close_from(int first) {
    if (close_range((unsigned)first, ~0U, 0) == 0)
        return;
    /* Kernels before 5.9 have no close_range. */
    struct rlimit limit;
    int last = 65536;
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < (1U << 20))
        last = (int)limit.rlim_cur;
    for (int descriptor = first; descriptor < last; descriptor++)
        close(descriptor);
}

/* The child, between fork and exec. The host may have threads (a display manager's worker,
 * sshd's monitor) and after fork only this one is left, possibly while another held malloc's or
 * NSS's lock: so only async-signal-safe calls here, everything else was prepared before fork.
 * Any failure ends the child with 127 before the hook runs. */
static void __attribute__((noreturn)) exec_hook(const struct launch *launch) {
    /* A session and process group of its own: the timeout kills the whole group, and the hook
     * gets none of the host's job control or terminal signals. */
    if (setsid() < 0)
        _exit(127);
    /* Dispositions set to SIG_IGN and the blocked mask survive exec; the hook gets neither. */
    struct sigaction default_action = {.sa_handler = SIG_DFL};
    sigemptyset(&default_action.sa_mask);
    for (int number = 1; number < NSIG; number++)
        (void)sigaction(number, &default_action, NULL);
    sigset_t none;
    sigemptyset(&none);
    if (sigprocmask(SIG_SETMASK, &none, NULL) != 0)
        _exit(127);

    /* Standard input: the password pipe or /dev/null; standard output and error: /dev/null
     * until log= replaces them, below, as the user. Both are first moved above 2, since a host
     * may run with 0-2 closed, and then the pipe itself was given one of them. */
    int input = launch->input >= 0 ? launch->input : open("/dev/null", O_RDONLY | O_CLOEXEC);
    int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (input < 0 || null < 0)
        _exit(127);
    input = fcntl(input, F_DUPFD_CLOEXEC, 3);
    null = fcntl(null, F_DUPFD_CLOEXEC, 3);
    if (input < 0 || null < 0 || dup2(input, STDIN_FILENO) < 0 || dup2(null, STDOUT_FILENO) < 0
        || dup2(null, STDERR_FILENO) < 0)
        _exit(127);
    close_from(3);

    /* The user, for good: groups, gid, uid (the real, effective and saved IDs, as setuid from
     * root sets all three). */
    if (launch->switch_user
        && (setgroups(launch->group_count, launch->groups) != 0 || setgid(launch->gid) != 0
            || setuid(launch->uid) != 0))
        _exit(127);
    uid_t real, effective, saved;
    if (getresuid(&real, &effective, &saved) != 0 || real != launch->uid || effective != launch->uid
        || saved != launch->uid)
        _exit(127);
    if (launch->switch_user) {
        gid_t real_group, effective_group, saved_group;
        if (getresgid(&real_group, &effective_group, &saved_group) != 0 || real_group != launch->gid
            || effective_group != launch->gid || saved_group != launch->gid)
            _exit(127);
    }
    /* Getting root back must fail (no saved root ID, no CAP_SETUID left behind). */
    if (launch->uid != 0 && setuid(0) == 0)
        _exit(127);

    /* Files the hook creates are the user's alone, whatever umask the host runs with. */
    umask(077);
    if (chdir("/") != 0)
        _exit(127);
    /* Opened as the user: it can then only be a file the user may write anyway. Opened as root,
     * a path in a directory others can write (/tmp) would let them point root's write at any
     * file of the system. */
    if (launch->log != NULL) {
        int log_file = open(launch->log, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0600);
        if (log_file >= 0 && (dup2(log_file, STDOUT_FILENO) < 0 || dup2(log_file, STDERR_FILENO) < 0))
            _exit(127);
    }
    execve(launch->argv[0], launch->argv, launch->environment);
    _exit(127);
}

/* Appends NAME=VALUE to environment. */
static bool add_variable(char **environment, size_t *count, const char *name, const char *value) {
    char *entry = NULL;
    if (asprintf(&entry, "%s=%s", name, value) < 0)
        return false;
    environment[(*count)++] = entry;
    return true;
}

/* Seconds since `start` on the monotonic clock. */
static double seconds_since(const struct timespec *start) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - start->tv_sec) + (double)(now.tv_nsec - start->tv_nsec) / 1e9;
}

/* Waits for the hook, `timeout` seconds at most, then kills its process group. Only this pid is
 * ever waited for: the host's other children are the host's to reap. */
static void wait_for_hook(pam_handle_t *pamh, const struct options *options, const char *type, pid_t pid) {
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    /* 1 ms, doubling to 50 ms: a quick hook delays the login by little, a slow one costs few
     * wake-ups. */
    long pause_ns = 1000000;
    for (;;) {
        int status = 0;
        pid_t waited = waitpid(pid, &status, WNOHANG);
        if (waited == pid) {
            if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
                if (options->debug)
                    pam_syslog(pamh, LOG_DEBUG, "%s: the hook finished", type);
            } else if (WIFEXITED(status)) {
                pam_syslog(pamh, LOG_NOTICE, "%s: the hook exited with %d", type, WEXITSTATUS(status));
            } else if (WIFSIGNALED(status)) {
                pam_syslog(pamh, LOG_NOTICE, "%s: the hook was killed by signal %d", type, WTERMSIG(status));
            }
            return;
        }
        if (waited < 0 && errno == EINTR)
            continue;
        if (waited < 0) {
            /* ECHILD: the host's own SIGCHLD handler reaped it first. */
            if (options->debug)
                pam_syslog(pamh, LOG_DEBUG, "%s: the hook's status is not known: %m", type);
            return;
        }
        if (seconds_since(&start) >= options->timeout) {
            /* The group first (the hook and whatever it started), then the pid itself in case
             * the child had not yet made its group; the pid cannot have been reused, since it
             * is not reaped. */
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
            }
            pam_syslog(pamh, LOG_WARNING, "%s: the hook did not finish within %u s and was killed", type,
                       options->timeout);
            return;
        }
        struct timespec interval = {.tv_sec = 0, .tv_nsec = pause_ns};
        nanosleep(&interval, NULL);
        if (pause_ns < 50000000)
            pause_ns *= 2;
    }
}

/* Runs the hook as PAM_USER with PAM_TYPE=type and, when given, the password on its standard
 * input; returns when it has finished or been killed. Failures are logged, never returned. */
static void run_hook(pam_handle_t *pamh, const struct options *options, const char *type, const char *token,
                     size_t length) {
    const void *item = NULL;
    if (pam_get_item(pamh, PAM_USER, &item) != PAM_SUCCESS || item == NULL || *(const char *)item == '\0') {
        if (options->debug)
            pam_syslog(pamh, LOG_DEBUG, "%s: no user; the hook is not run", type);
        return;
    }
    const char *user = item;
    const char *service = "";
    if (pam_get_item(pamh, PAM_SERVICE, &item) == PAM_SUCCESS && item != NULL)
        service = item;
    struct passwd *entry = pam_modutil_getpwnam(pamh, user);
    if (entry == NULL) {
        if (options->debug)
            pam_syslog(pamh, LOG_DEBUG, "%s: no such user: %s", type, user);
        return;
    }

    struct launch launch = {
        .argv = options->command, .log = options->log, .input = -1, .uid = entry->pw_uid, .gid = entry->pw_gid};
    /* As root (login, sshd, a display manager) the child becomes the user; as the user (a screen
     * locker) it stays so; as anyone else it could not become the user, so it does not run. */
    uid_t real, effective, saved;
    if (getresuid(&real, &effective, &saved) != 0)
        return;
    if (real == entry->pw_uid && effective == entry->pw_uid && saved == entry->pw_uid) {
        launch.switch_user = false;
    } else if (effective == 0) {
        launch.switch_user = true;
    } else {
        if (options->debug)
            pam_syslog(pamh, LOG_DEBUG, "%s: running as uid %u, neither root nor %s; the hook is not run", type,
                       (unsigned)effective, user);
        return;
    }

    gid_t *groups = NULL;
    char *environment[16] = {NULL};
    size_t variables = 0;
    int pipe_ends[2] = {-1, -1};
    struct sigaction previous_child_action;
    bool restore_child_action = false;

    /* initgroups' list, looked up now: NSS must not run after fork. */
    if (launch.switch_user) {
        int capacity = 32;
        for (;;) {
            gid_t *grown = realloc(groups, (size_t)capacity * sizeof *groups);
            if (grown == NULL)
                goto done;
            groups = grown;
            int count = capacity;
            if (getgrouplist(entry->pw_name, entry->pw_gid, groups, &count) >= 0) {
                launch.groups = groups;
                launch.group_count = (size_t)count;
                break;
            }
            /* Too small: glibc has set count to what is needed. */
            capacity = count > capacity ? count : capacity * 2;
            if (capacity > 65536)
                goto done;
        }
    }

    /* A clean environment, never the host's: it could carry LD_PRELOAD, a PATH or a TCTI of
     * the host's choosing into a process of the user's. */
    char runtime[64];
    snprintf(runtime, sizeof runtime, "/run/user/%u", (unsigned)entry->pw_uid);
    struct stat runtime_status;
    bool has_runtime = lstat(runtime, &runtime_status) == 0 && S_ISDIR(runtime_status.st_mode)
                       && runtime_status.st_uid == entry->pw_uid;
    /* The logind session this is (pam_systemd's, in the PAM environment), so that the hook can
     * tell it from the user's other sessions at close; passed only as logind spells IDs. */
    const char *session_id = pam_getenv(pamh, "XDG_SESSION_ID");
    bool has_session_id = session_id != NULL && *session_id != '\0' && strlen(session_id) <= 64
                          && strspn(session_id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
                                 == strlen(session_id);
    if (!add_variable(environment, &variables, "PATH", "/usr/local/bin:/usr/bin:/bin")
        || !add_variable(environment, &variables, "HOME", entry->pw_dir ? entry->pw_dir : "/")
        || !add_variable(environment, &variables, "USER", entry->pw_name)
        || !add_variable(environment, &variables, "LOGNAME", entry->pw_name)
        || !add_variable(environment, &variables, "SHELL", entry->pw_shell ? entry->pw_shell : "/bin/sh")
        || !add_variable(environment, &variables, "PAM_TYPE", type)
        || !add_variable(environment, &variables, "PAM_USER", user)
        || !add_variable(environment, &variables, "PAM_SERVICE", service)
        || (has_runtime && !add_variable(environment, &variables, "XDG_RUNTIME_DIR", runtime))
        || (has_session_id && !add_variable(environment, &variables, "XDG_SESSION_ID", session_id)))
        goto done;

    /* The password goes into the pipe before fork, and the write end is closed before fork too:
     * the hook reads it and then end of file, and inherits no write end that would keep it
     * waiting. The write cannot raise SIGPIPE in the host, since the read end is open here, nor
     * block or be cut short: it is at most TOKEN_MAX (= PIPE_BUF) bytes into an empty pipe, and
     * a write of up to PIPE_BUF bytes to a non-blocking pipe is all or nothing. */
    if (token != NULL && length > 0) {
        if (pipe2(pipe_ends, O_CLOEXEC) != 0 || fcntl(pipe_ends[1], F_SETFL, O_NONBLOCK) != 0) {
            pam_syslog(pamh, LOG_ERR, "%s: cannot make a pipe: %m", type);
            goto done;
        }
        ssize_t written;
        do {
            written = write(pipe_ends[1], token, length);
        } while (written < 0 && errno == EINTR);
        close(pipe_ends[1]);
        pipe_ends[1] = -1;
        if (written != (ssize_t)length) {
            pam_syslog(pamh, LOG_ERR, "%s: cannot pass the password to the hook: %m", type);
            goto done;
        }
        launch.input = pipe_ends[0];
    }

    /* A host that ignores SIGCHLD (or set SA_NOCLDWAIT) has its children reaped by the kernel,
     * and waitpid could never see the hook's end: for as long as the hook runs, children are
     * waited for (pam_unix does the same around unix_chkpwd). A host's own SIGCHLD handler is
     * left alone: at worst it reaps the hook first, and wait_for_hook stops waiting. */
    if (sigaction(SIGCHLD, NULL, &previous_child_action) == 0
        && ((!(previous_child_action.sa_flags & SA_SIGINFO) && previous_child_action.sa_handler == SIG_IGN)
            || (previous_child_action.sa_flags & SA_NOCLDWAIT))) {
        struct sigaction default_action = {.sa_handler = SIG_DFL};
        sigemptyset(&default_action.sa_mask);
        restore_child_action = sigaction(SIGCHLD, &default_action, NULL) == 0;
    }

    launch.environment = environment;
    pid_t pid = fork();
    if (pid == 0)
        exec_hook(&launch);
    if (pid < 0) {
        pam_syslog(pamh, LOG_ERR, "%s: cannot start the hook: fork: %m", type);
        goto done;
    }
    if (options->debug)
        pam_syslog(pamh, LOG_DEBUG, "%s: started %s for %s%s", type, launch.argv[0], user,
                   launch.input >= 0 ? ", with the password" : "");
    close(pipe_ends[0]);
    pipe_ends[0] = -1;
    wait_for_hook(pamh, options, type, pid);

done:
    if (restore_child_action)
        sigaction(SIGCHLD, &previous_child_action, NULL);
    for (int end = 0; end < 2; end++)
        if (pipe_ends[end] >= 0)
            close(pipe_ends[end]);
    for (size_t index = 0; index < variables; index++)
        free(environment[index]);
    free(groups);
}

/* ---- The PAM entry points ---- */

/* Keeps the password the modules before this one accepted (or were given), for the session. */
PAM_EXTERN int pam_sm_authenticate(pam_handle_t *pamh, int flags, int argc, const char **argv) {
    (void)flags;
    struct options options;
    /* A password kept by an earlier attempt on this handle (the application asks again after a
     * failure) is never the one of this attempt. */
    stash_drop(pamh);
    if (!parse_options(pamh, argc, argv, &options))
        return PAM_IGNORE;
    stash_keep(pamh, &options);
    free_options(&options);
    return PAM_IGNORE;
}

/* Linux-PAM's pam_setcred(3) flags, and what each means here:
 *  - PAM_ESTABLISH_CRED: login, su, sshd and display managers call it once pam_authenticate
 *    has succeeded, before pam_open_session. Ignored: open_session unlocks, and unlocking twice
 *    would spend two tries when the password is not the passcode.
 *  - PAM_REINITIALIZE_CRED, PAM_REFRESH_CRED: what a screen locker calls after a successful
 *    re-authentication, with no session to open (GDM's lock screen: REINITIALIZE; i3lock:
 *    REFRESH; xscreensaver: either, by platform). The hook runs as at open_session, when there
 *    is a stash. util-linux login also calls REINITIALIZE right after open_session, which has
 *    dropped the stash by then: nothing runs twice.
 *  - PAM_DELETE_CRED: ignored; close_session locks.
 * pam_setcred(3) is for after a successful pam_authenticate, and Linux-PAM replays that
 * authentication's path through the auth stack for setcred (its "frozen chain"): this runs only
 * when the authentication reached this module's auth line. A locker that calls setcred after a
 * failed authentication too (some do) would pass a rejected password on a stack that goes on
 * after a failure; on one that stops there (Debian's common-auth) nothing was kept. */
PAM_EXTERN int pam_sm_setcred(pam_handle_t *pamh, int flags, int argc, const char **argv) {
    if (!((unsigned)flags & (PAM_REINITIALIZE_CRED | PAM_REFRESH_CRED)))
        return PAM_IGNORE;
    struct options options;
    if (!parse_options(pamh, argc, argv, &options))
        return PAM_IGNORE;
    const struct stash *stash = stash_find(pamh, &options);
    if (stash != NULL)
        run_hook(pamh, &options, "setcred", stash->token, stash->length);
    else if (options.debug)
        pam_syslog(pamh, LOG_DEBUG, "setcred: no password kept; the hook is not run");
    stash_drop(pamh);
    free_options(&options);
    return PAM_IGNORE;
}

/* The hook unlocks with the kept password (a session without one gives it an empty input),
 * then the password is forgotten. */
PAM_EXTERN int pam_sm_open_session(pam_handle_t *pamh, int flags, int argc, const char **argv) {
    (void)flags;
    struct options options;
    if (parse_options(pamh, argc, argv, &options)) {
        const struct stash *stash = stash_find(pamh, &options);
        run_hook(pamh, &options, "open_session", stash ? stash->token : NULL, stash ? stash->length : 0);
        free_options(&options);
    }
    stash_drop(pamh);
    return PAM_SUCCESS;
}

/* The hook locks the keychain when this is the user's last session. */
PAM_EXTERN int pam_sm_close_session(pam_handle_t *pamh, int flags, int argc, const char **argv) {
    (void)flags;
    struct options options;
    if (parse_options(pamh, argc, argv, &options)) {
        run_hook(pamh, &options, "close_session", NULL, 0);
        free_options(&options);
    }
    stash_drop(pamh);
    return PAM_SUCCESS;
}

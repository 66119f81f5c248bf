// Calls into libsystemd's sd-bus through dlopen, so that libsystemd loads with the first bus and
// not with the process (see include/CSystemdBus.h).
#include "CSystemdBus.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

static void *library;
static char loadError[256];
static pthread_once_t loaded = PTHREAD_ONCE_INIT;

static void load(void) {
    // RTLD_LOCAL: its symbols stay out of the global scope, where nothing else looks for them.
    library = dlopen("libsystemd.so.0", RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) {
        const char *reason = dlerror();
        snprintf(loadError, sizeof loadError, "cannot load libsystemd.so.0 (install libsystemd0): %s",
                 reason != NULL ? reason : "unknown error");
    }
}

const char *tk_sd_bus_load_error(void) {
    pthread_once(&loaded, load);
    return library != NULL ? NULL : loadError;
}

/* libsystemd's own definition of `name`, or NULL when it cannot be loaded. */
static void *systemdFunction(const char *name) {
    pthread_once(&loaded, load);
    return library != NULL ? dlsym(library, name) : NULL;
}

/* Defines tk_<name>, which finds <name> once and calls it; `failure` is returned without libsystemd. */
#define FORWARD(ret, name, failure, params, args)                                        \
    ret tk_##name params {                                                               \
        typedef ret(*Function) params;                                                   \
        static _Atomic(Function) found;                                                  \
        Function function = atomic_load_explicit(&found, memory_order_acquire);          \
        if (function == NULL) {                                                          \
            function = (Function)systemdFunction(#name);                                 \
            if (function == NULL) return failure;                                        \
            atomic_store_explicit(&found, function, memory_order_release);               \
        }                                                                                \
        return function args;                                                            \
    }

FORWARD(int, sd_bus_new, -ENOSYS, (sd_bus **ret), (ret))
FORWARD(int, sd_bus_open_user_with_description, -ENOSYS, (sd_bus **ret, const char *description), (ret, description))
FORWARD(int, sd_bus_open_system_with_description, -ENOSYS, (sd_bus **ret, const char *description), (ret, description))
FORWARD(int, sd_bus_set_address, -ENOSYS, (sd_bus *bus, const char *address), (bus, address))
FORWARD(int, sd_bus_set_bus_client, -ENOSYS, (sd_bus *bus, int b), (bus, b))
FORWARD(int, sd_bus_set_description, -ENOSYS, (sd_bus *bus, const char *description), (bus, description))
FORWARD(int, sd_bus_start, -ENOSYS, (sd_bus *bus), (bus))
FORWARD(int, sd_bus_set_method_call_timeout, -ENOSYS, (sd_bus *bus, uint64_t usec), (bus, usec))
FORWARD(sd_bus*, sd_bus_flush_close_unref, NULL, (sd_bus *bus), (bus))
FORWARD(int, sd_bus_get_fd, -ENOSYS, (sd_bus *bus), (bus))
FORWARD(int, sd_bus_get_events, -ENOSYS, (sd_bus *bus), (bus))
FORWARD(int, sd_bus_get_timeout, -ENOSYS, (sd_bus *bus, uint64_t *timeout_usec), (bus, timeout_usec))
FORWARD(int, sd_bus_process, -ENOSYS, (sd_bus *bus, sd_bus_message **r), (bus, r))
FORWARD(int, sd_bus_call, -ENOSYS, (sd_bus *bus, sd_bus_message *m, uint64_t usec, sd_bus_error *ret_error, sd_bus_message **reply), (bus, m, usec, ret_error, reply))
FORWARD(int, sd_bus_send, -ENOSYS, (sd_bus *bus, sd_bus_message *m, uint64_t *cookie), (bus, m, cookie))
FORWARD(int, sd_bus_request_name, -ENOSYS, (sd_bus *bus, const char *name, uint64_t flags), (bus, name, flags))
FORWARD(int, sd_bus_add_match, -ENOSYS, (sd_bus *bus, sd_bus_slot **slot, const char *match, sd_bus_message_handler_t callback, void *userdata), (bus, slot, match, callback, userdata))
FORWARD(int, sd_bus_match_signal, -ENOSYS, (sd_bus *bus, sd_bus_slot **ret, const char *sender, const char *path, const char *interface, const char *member, sd_bus_message_handler_t callback, void *userdata), (bus, ret, sender, path, interface, member, callback, userdata))
FORWARD(int, sd_bus_add_fallback, -ENOSYS, (sd_bus *bus, sd_bus_slot **slot, const char *prefix, sd_bus_message_handler_t callback, void *userdata), (bus, slot, prefix, callback, userdata))
FORWARD(sd_bus_slot*, sd_bus_slot_unref, NULL, (sd_bus_slot *slot), (slot))
FORWARD(int, sd_bus_get_name_creds, -ENOSYS, (sd_bus *bus, const char *name, uint64_t mask, sd_bus_creds **creds), (bus, name, mask, creds))
FORWARD(int, sd_bus_creds_get_pid, -ENOSYS, (sd_bus_creds *c, pid_t *pid), (c, pid))
FORWARD(int, sd_bus_creds_get_uid, -ENOSYS, (sd_bus_creds *c, uid_t *uid), (c, uid))
FORWARD(int, sd_bus_creds_get_euid, -ENOSYS, (sd_bus_creds *c, uid_t *euid), (c, euid))
FORWARD(int, sd_bus_creds_get_exe, -ENOSYS, (sd_bus_creds *c, const char **exe), (c, exe))
FORWARD(sd_bus_creds*, sd_bus_creds_unref, NULL, (sd_bus_creds *c), (c))
FORWARD(int, sd_bus_error_set, -ENOSYS, (sd_bus_error *e, const char *name, const char *message), (e, name, message))
void tk_sd_bus_error_free(sd_bus_error *e) {
    typedef void (*Function)(sd_bus_error *e);
    static _Atomic(Function) found;
    Function function = atomic_load_explicit(&found, memory_order_acquire);
    if (function == NULL) {
        function = (Function)systemdFunction("sd_bus_error_free");
        if (function == NULL) return;
        atomic_store_explicit(&found, function, memory_order_release);
    }
    function(e);
}
FORWARD(int, sd_bus_message_new_method_call, -ENOSYS, (sd_bus *bus, sd_bus_message **m, const char *destination, const char *path, const char *interface, const char *member), (bus, m, destination, path, interface, member))
FORWARD(int, sd_bus_message_new_method_return, -ENOSYS, (sd_bus_message *call, sd_bus_message **m), (call, m))
FORWARD(int, sd_bus_message_new_signal, -ENOSYS, (sd_bus *bus, sd_bus_message **m, const char *path, const char *interface, const char *member), (bus, m, path, interface, member))
FORWARD(int, sd_bus_reply_method_error, -ENOSYS, (sd_bus_message *call, const sd_bus_error *e), (call, e))
FORWARD(sd_bus_message*, sd_bus_message_unref, NULL, (sd_bus_message *m), (m))
FORWARD(int, sd_bus_message_append_basic, -ENOSYS, (sd_bus_message *m, char type, const void *p), (m, type, p))
FORWARD(int, sd_bus_message_append_array, -ENOSYS, (sd_bus_message *m, char type, const void *ptr, size_t size), (m, type, ptr, size))
FORWARD(int, sd_bus_message_open_container, -ENOSYS, (sd_bus_message *m, char type, const char *contents), (m, type, contents))
FORWARD(int, sd_bus_message_close_container, -ENOSYS, (sd_bus_message *m), (m))
FORWARD(int, sd_bus_message_enter_container, -ENOSYS, (sd_bus_message *m, char type, const char *contents), (m, type, contents))
FORWARD(int, sd_bus_message_exit_container, -ENOSYS, (sd_bus_message *m), (m))
FORWARD(int, sd_bus_message_read_basic, -ENOSYS, (sd_bus_message *m, char type, void *p), (m, type, p))
FORWARD(int, sd_bus_message_read_array, -ENOSYS, (sd_bus_message *m, char type, const void **ptr, size_t *size), (m, type, ptr, size))
FORWARD(int, sd_bus_message_peek_type, -ENOSYS, (sd_bus_message *m, char *type, const char **contents), (m, type, contents))
FORWARD(int, sd_bus_message_skip, -ENOSYS, (sd_bus_message *m, const char *types), (m, types))
FORWARD(int, sd_bus_message_is_method_call, -ENOSYS, (sd_bus_message *m, const char *interface, const char *member), (m, interface, member))
FORWARD(const char*, sd_bus_message_get_destination, NULL, (sd_bus_message *m), (m))
FORWARD(const char*, sd_bus_message_get_interface, NULL, (sd_bus_message *m), (m))
FORWARD(const char*, sd_bus_message_get_member, NULL, (sd_bus_message *m), (m))
FORWARD(const char*, sd_bus_message_get_path, NULL, (sd_bus_message *m), (m))
FORWARD(const char*, sd_bus_message_get_sender, NULL, (sd_bus_message *m), (m))
FORWARD(const char*, sd_bus_message_get_signature, NULL, (sd_bus_message *m, int complete), (m, complete))

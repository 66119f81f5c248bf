// libsystemd's sd-bus, for the DBus target only (no other target imports this module).
//
// libsystemd is not linked: it is loaded the first time a bus is used (LazySystemdBus.c), so a
// program that never opens a bus (a CLI lookup) does not load it and its six dependencies at
// start (about 0.5 ms of a 10 ms lookup). Each `tk_` function has the signature of the sd-bus
// function of the same name after the prefix and calls it; the sd-bus names themselves are not
// linked and must not be called (the link fails if one is).
//
// Swift cannot call C variadic functions, so the Swift side uses the non-variadic calls
// (sd_bus_message_new_method_call + sd_bus_message_append_basic + sd_bus_call,
// sd_bus_message_read_basic, sd_bus_match_signal).
#ifndef TPMKEYCHAIN_CSYSTEMDBUS_H
#define TPMKEYCHAIN_CSYSTEMDBUS_H

#include <poll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <systemd/sd-bus.h>

/// Why libsystemd could not be loaded, or NULL once it is loaded (loading it if not yet tried).
/// While it cannot be loaded, the `tk_` functions that return an int return -ENOSYS.
const char *tk_sd_bus_load_error(void);

int tk_sd_bus_new(sd_bus **ret);
int tk_sd_bus_open_user_with_description(sd_bus **ret, const char *description);
int tk_sd_bus_open_system_with_description(sd_bus **ret, const char *description);
int tk_sd_bus_set_address(sd_bus *bus, const char *address);
int tk_sd_bus_set_bus_client(sd_bus *bus, int b);
int tk_sd_bus_set_description(sd_bus *bus, const char *description);
int tk_sd_bus_start(sd_bus *bus);
int tk_sd_bus_set_method_call_timeout(sd_bus *bus, uint64_t usec);
sd_bus* tk_sd_bus_flush_close_unref(sd_bus *bus);
int tk_sd_bus_get_fd(sd_bus *bus);
int tk_sd_bus_get_events(sd_bus *bus);
int tk_sd_bus_get_timeout(sd_bus *bus, uint64_t *timeout_usec);
int tk_sd_bus_process(sd_bus *bus, sd_bus_message **r);
int tk_sd_bus_call(sd_bus *bus, sd_bus_message *m, uint64_t usec, sd_bus_error *ret_error, sd_bus_message **reply);
int tk_sd_bus_send(sd_bus *bus, sd_bus_message *m, uint64_t *cookie);
int tk_sd_bus_request_name(sd_bus *bus, const char *name, uint64_t flags);
int tk_sd_bus_add_match(sd_bus *bus, sd_bus_slot **slot, const char *match, sd_bus_message_handler_t callback, void *userdata);
int tk_sd_bus_match_signal(sd_bus *bus, sd_bus_slot **ret, const char *sender, const char *path, const char *interface, const char *member, sd_bus_message_handler_t callback, void *userdata);
int tk_sd_bus_add_fallback(sd_bus *bus, sd_bus_slot **slot, const char *prefix, sd_bus_message_handler_t callback, void *userdata);
sd_bus_slot* tk_sd_bus_slot_unref(sd_bus_slot *slot);
int tk_sd_bus_get_name_creds(sd_bus *bus, const char *name, uint64_t mask, sd_bus_creds **creds);
int tk_sd_bus_creds_get_pid(sd_bus_creds *c, pid_t *pid);
int tk_sd_bus_creds_get_uid(sd_bus_creds *c, uid_t *uid);
int tk_sd_bus_creds_get_euid(sd_bus_creds *c, uid_t *euid);
int tk_sd_bus_creds_get_exe(sd_bus_creds *c, const char **exe);
sd_bus_creds* tk_sd_bus_creds_unref(sd_bus_creds *c);
int tk_sd_bus_error_set(sd_bus_error *e, const char *name, const char *message);
void tk_sd_bus_error_free(sd_bus_error *e);
int tk_sd_bus_message_new_method_call(sd_bus *bus, sd_bus_message **m, const char *destination, const char *path, const char *interface, const char *member);
int tk_sd_bus_message_new_method_return(sd_bus_message *call, sd_bus_message **m);
int tk_sd_bus_message_new_signal(sd_bus *bus, sd_bus_message **m, const char *path, const char *interface, const char *member);
int tk_sd_bus_reply_method_error(sd_bus_message *call, const sd_bus_error *e);
sd_bus_message* tk_sd_bus_message_unref(sd_bus_message *m);
int tk_sd_bus_message_append_basic(sd_bus_message *m, char type, const void *p);
int tk_sd_bus_message_append_array(sd_bus_message *m, char type, const void *ptr, size_t size);
int tk_sd_bus_message_open_container(sd_bus_message *m, char type, const char *contents);
int tk_sd_bus_message_close_container(sd_bus_message *m);
int tk_sd_bus_message_enter_container(sd_bus_message *m, char type, const char *contents);
int tk_sd_bus_message_exit_container(sd_bus_message *m);
int tk_sd_bus_message_read_basic(sd_bus_message *m, char type, void *p);
int tk_sd_bus_message_read_array(sd_bus_message *m, char type, const void **ptr, size_t *size);
int tk_sd_bus_message_peek_type(sd_bus_message *m, char *type, const char **contents);
int tk_sd_bus_message_skip(sd_bus_message *m, const char *types);
int tk_sd_bus_message_is_method_call(sd_bus_message *m, const char *interface, const char *member);
const char* tk_sd_bus_message_get_destination(sd_bus_message *m);
const char* tk_sd_bus_message_get_interface(sd_bus_message *m);
const char* tk_sd_bus_message_get_member(sd_bus_message *m);
const char* tk_sd_bus_message_get_path(sd_bus_message *m);
const char* tk_sd_bus_message_get_sender(sd_bus_message *m);
const char* tk_sd_bus_message_get_signature(sd_bus_message *m, int complete);

#endif

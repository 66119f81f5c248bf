// libsystemd's sd-bus (libsystemd-dev) and eventfd, for TPMKeychainFprintd only: no other target
// imports this module. Swift cannot call C variadic functions, so the Swift side uses the
// non-variadic calls (sd_bus_message_new_method_call + sd_bus_message_append_basic + sd_bus_call,
// sd_bus_message_read_basic, sd_bus_match_signal).
#ifndef TPMKEYCHAIN_CSYSTEMDBUS_SHIM_H
#define TPMKEYCHAIN_CSYSTEMDBUS_SHIM_H

#include <poll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <systemd/sd-bus.h>

#endif

// The kernel key retention service (keyrings(7)), for SystemCalls only (no other target imports
// this module). Swift cannot call the variadic syscall(2), and Debian has no libkeyutils by
// default, so these make the few calls themselves. Each returns -1 with errno set on failure.
#ifndef TPMKEYCHAIN_CKERNELKEYRING_H
#define TPMKEYCHAIN_CKERNELKEYRING_H

#include <stddef.h>

/// Adds (or replaces) a "user" key named `description` holding `payload` to the user keyring
/// (@u), readable by this user's processes and nobody else's, expiring after `timeout_seconds`.
/// Returns the key's serial number.
long tk_user_keyring_store(const char *description, const void *payload, size_t length, unsigned timeout_seconds);

/// Reads the "user" key named `description` from the user keyring into `buffer`. Returns the
/// payload's length (which may exceed `capacity`: then only `capacity` bytes were copied).
long tk_user_keyring_read(const char *description, void *buffer, size_t capacity);

/// Removes the "user" key named `description` from the user keyring (invalidates it).
long tk_user_keyring_remove(const char *description);

#endif

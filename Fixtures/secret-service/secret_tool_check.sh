#!/bin/bash
# secret-tool (libsecret-tools) against a Secret Service provider on $DBUS_SESSION_BUS_ADDRESS.
#
#   DBUS_SESSION_BUS_ADDRESS=... ./secret_tool_check.sh
#
# store (label, attributes, secret on stdin) / lookup / search --all / clear, with assertions.
# Prints "ok secret-tool" on success, "FAIL secret-tool: ..." and exits 1 otherwise.
#
# secret-tool 0.20.5 behaviour this relies on (seen against gnome-keyring 42.1):
#  - store reads the whole of stdin verbatim when it is not a tty (a trailing newline is kept);
#    lookup writes the secret verbatim (no newline added when stdout is not a tty).
#  - store passes no xdg:schema attribute (secret-tool's schema is DONT_MATCH_NAME), and stores
#    with replace=TRUE into /org/freedesktop/secrets/aliases/default.
#  - search prints "[/ID]" (the item path with its collection prefix cut off), label, secret, created, modified, schema on stdout but the
#    "attribute.NAME = VALUE" lines on stderr; search without --all shows one item only.
#  - lookup of nothing prints nothing and exits 1.
# Validated against gnome-keyring-daemon 42.1 (Debian 12) on a private bus: passes.
set -u

: "${DBUS_SESSION_BUS_ADDRESS:?DBUS_SESSION_BUS_ADDRESS is not set}"
command -v secret-tool >/dev/null || { echo "FAIL secret-tool: secret-tool not installed" >&2; exit 1; }

RID="$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
SVC="tpmkc-st-$RID"
TMP="$(mktemp -d)"
cleanup() {
    secret-tool clear service "$SVC" >/dev/null 2>&1
    secret-tool clear service "$SVC" >/dev/null 2>&1
    rm -rf "$TMP"
}
trap cleanup EXIT

fail() { echo "FAIL secret-tool: $*" >&2; exit 1; }

# 1. store: multi-line secret without a trailing newline, non-ASCII label
printf 'p@ss w0rd ✓\nsecond line' > "$TMP/s1"
secret-tool store --label="ST test alice ✓" service "$SVC" account alice app st-check < "$TMP/s1" \
    || fail "store alice exited $?"

# 2. lookup by all attributes, and by a subset
secret-tool lookup service "$SVC" account alice app st-check > "$TMP/out" || fail "lookup (all attributes) exited $?"
cmp -s "$TMP/s1" "$TMP/out" || fail "lookup returned $(od -c "$TMP/out" | head -3), expected $(od -c "$TMP/s1" | head -3)"
secret-tool lookup service "$SVC" account alice > "$TMP/out" || fail "lookup (subset) exited $?"
cmp -s "$TMP/s1" "$TMP/out" || fail "lookup by attribute subset returned a different secret"

# 3. lookup of something absent: exit 1, no output
secret-tool lookup service "$SVC" account nobody > "$TMP/out" 2>/dev/null && fail "lookup of an absent item exited 0"
[ -s "$TMP/out" ] && fail "lookup of an absent item printed $(cat "$TMP/out")"

# 4. a second item (trailing newline kept), then search --all sees both
printf 'bob-secret\n' > "$TMP/s2"
secret-tool store --label="ST test bob" service "$SVC" account bob < "$TMP/s2" || fail "store bob exited $?"
secret-tool lookup service "$SVC" account bob > "$TMP/out" || fail "lookup bob exited $?"
cmp -s "$TMP/s2" "$TMP/out" || fail "bob's secret (with trailing newline) did not round-trip"

secret-tool search --all service "$SVC" > "$TMP/search" 2> "$TMP/search.err" || fail "search --all exited $?"
cat "$TMP/search" "$TMP/search.err" > "$TMP/search.all"
n=$(grep -c '^\[/' "$TMP/search")
[ "$n" = 2 ] || fail "search --all found $n items, expected 2: $(cat "$TMP/search.all")"
grep -qx 'label = ST test alice ✓' "$TMP/search" || fail "search --all lacks alice's label"
grep -qx 'label = ST test bob' "$TMP/search" || fail "search --all lacks bob's label"
grep -qx 'secret = bob-secret' "$TMP/search" || fail "search --all lacks bob's secret"
grep -qx 'attribute.account = alice' "$TMP/search.all" || fail "search --all lacks attribute.account = alice"
grep -qx 'attribute.app = st-check' "$TMP/search.all" || fail "search --all lacks attribute.app = st-check"
grep -qx "attribute.service = $SVC" "$TMP/search.all" || fail "search --all lacks attribute.service"
grep -Eq '^created = [0-9]{4}-[0-9]{2}-[0-9]{2} ' "$TMP/search" || fail "search --all lacks a created date"
grep -Eq '^modified = [0-9]{4}-[0-9]{2}-[0-9]{2} ' "$TMP/search" || fail "search --all lacks a modified date"

# 5. storing again with the same attributes replaces
printf 'new alice secret' > "$TMP/s3"
secret-tool store --label="ST test alice v2" service "$SVC" account alice app st-check < "$TMP/s3" \
    || fail "second store of alice exited $?"
secret-tool search --all service "$SVC" account alice > "$TMP/search" 2>/dev/null
n=$(grep -c '^\[/' "$TMP/search")
[ "$n" = 1 ] || fail "after re-store with the same attributes: $n items, expected 1 (replace)"
grep -qx 'label = ST test alice v2' "$TMP/search" || fail "label not replaced"
secret-tool lookup service "$SVC" account alice > "$TMP/out"
cmp -s "$TMP/s3" "$TMP/out" || fail "secret not replaced"

# 6. clear one, then the rest
secret-tool clear service "$SVC" account alice || fail "clear alice exited $?"
secret-tool lookup service "$SVC" account alice > "$TMP/out" 2>/dev/null && fail "alice still found after clear"
secret-tool lookup service "$SVC" account bob > "$TMP/out" || fail "bob lost by clearing alice"
cmp -s "$TMP/s2" "$TMP/out" || fail "bob's secret changed by clearing alice"
secret-tool clear service "$SVC" || fail "clear service exited $?"
secret-tool search --all service "$SVC" > "$TMP/search" 2>/dev/null
[ -s "$TMP/search" ] && fail "items left after clear: $(cat "$TMP/search")"

echo "ok secret-tool"

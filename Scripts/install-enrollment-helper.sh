#!/usr/bin/env bash
# Installs the enrollment helper (run as root): tpm-keychain-enrollment, a socket-activated
# system service that tells each user a keyed hash of their own fingerprint files, so that a
# finger deleted and enrolled again under the same name invalidates biometryCurrentSet items,
# and binds each user's private stores to them (docs/SECURITY.md, "User binding").
#
#   sudo Scripts/install-enrollment-helper.sh [--libexec DIR] [--dry-run] [--uninstall]
#
# Installs DIR/tpm-keychain-enrollment (default /usr/local/libexec, built with the Swift runtime
# linked in), /etc/systemd/system/tpm-keychain-enrollment.socket and
# tpm-keychain-enrollment@.service, and starts the socket. Items bound before keep working: the
# first read after it adopts the better identifier (docs/SECURITY.md, "The enrollment helper").
# --uninstall keeps its key (/var/lib/tpm-keychain-enrollment): bound stores open again once it
# is back.
set -euo pipefail

libexec=/usr/local/libexec
dry_run=false
uninstall=false
while [ $# -gt 0 ]; do
    case "$1" in
        --libexec) [ $# -ge 2 ] || { echo "install-enrollment-helper.sh: --libexec needs a directory" >&2; exit 64; }
                   libexec="$2"; shift 2 ;;
        --dry-run) dry_run=true; shift ;;
        --uninstall) uninstall=true; shift ;;
        -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "install-enrollment-helper.sh: unknown argument: $1" >&2; exit 64 ;;
    esac
done
case "$libexec" in /*) ;; *) echo "install-enrollment-helper.sh: --libexec must be absolute" >&2; exit 64 ;; esac

run() {
    printf '+'; printf ' %q' "$@"; printf '\n'
    if ! $dry_run; then "$@"; fi
}

cd "$(dirname "$0")/.."
units=/etc/systemd/system
if $uninstall; then
    run systemctl disable --now tpm-keychain-enrollment.socket
    run rm -f "$units/tpm-keychain-enrollment.socket" "$units/tpm-keychain-enrollment@.service" "$libexec/tpm-keychain-enrollment"
    run systemctl daemon-reload
    echo "Removed. biometryCurrentSet items bound since it was installed are invalidated at their next read (the identifier goes back to the finger names)."
    echo "Stores bound to their users do not open until the helper is installed again; its key is kept in /var/lib/tpm-keychain-enrollment."
    exit 0
fi
if ! $dry_run && [ "$(id -u)" -ne 0 ]; then
    echo "install-enrollment-helper.sh: run it as root (it installs a system service)" >&2
    exit 77
fi
run Scripts/release-build.sh --product tpm-keychain-enrollment
run install -d -m 755 "$libexec"
run install -m 755 .build/release/tpm-keychain-enrollment "$libexec/tpm-keychain-enrollment"
run install -m 644 Scripts/enrollment-helper/tpm-keychain-enrollment.socket "$units/tpm-keychain-enrollment.socket"
printf '+ sed s|@LIBEXEC@|%s| > %s\n' "$libexec" "$units/tpm-keychain-enrollment@.service"
if ! $dry_run; then
    sed "s|@LIBEXEC@|$libexec|g" Scripts/enrollment-helper/tpm-keychain-enrollment@.service.in \
        > "$units/tpm-keychain-enrollment@.service"
    chmod 644 "$units/tpm-keychain-enrollment@.service"
fi
run systemctl daemon-reload
run systemctl enable --now tpm-keychain-enrollment.socket

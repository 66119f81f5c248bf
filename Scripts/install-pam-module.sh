#!/usr/bin/env bash
# Builds and installs pam_tpm_keychain.so (run as root), the PAM module that unlocks the keychain
# with the login password once PAM has accepted it (README.md, "Unlock with your login").
#
#   sudo Scripts/install-pam-module.sh [--output DIR] [--dry-run]
#
# Builds Sources/PAMModule/pam_tpm_keychain.c with cc against libpam (installing libpam0g-dev
# with apt-get first when its headers are missing and this runs as root) and installs the module
# root-owned, mode 0644, into the PAM module directory: /lib/<multiarch>/security (Debian,
# Ubuntu), else /lib64/security, else /lib/security. It edits no file under /etc/pam.d: which
# logins unlock the keychain is the administrator's choice (README).
#   --output DIR   only build DIR/pam_tpm_keychain.so (the tests use it); install nothing
#   --dry-run      print the commands, run none of them
set -euo pipefail

output=
dry_run=false
while [ $# -gt 0 ]; do
    case "$1" in
        --output) [ $# -ge 2 ] && [ -n "$2" ] || { echo "install-pam-module.sh: --output needs a directory" >&2; exit 64; }
                  output="$2"; shift 2 ;;
        --dry-run) dry_run=true; shift ;;
        -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "install-pam-module.sh: unknown argument: $1" >&2; exit 64 ;;
    esac
done
case "$output" in
    ''|/*) ;;
    *) output="$PWD/$output" ;;   # relative to where the script was called from
esac

run() {
    printf '+'; printf ' %q' "$@"; printf '\n'
    if ! $dry_run; then "$@"; fi
}

cd "$(dirname "$0")/.."
source=Sources/PAMModule/pam_tpm_keychain.c

# The C compiler: $CC, else cc, gcc or clang (a Swift toolchain brings clang).
compiler=${CC:-}
if [ -z "$compiler" ]; then
    for candidate in cc gcc clang; do
        if command -v "$candidate" >/dev/null; then compiler=$candidate; break; fi
    done
fi
[ -n "$compiler" ] || { echo "install-pam-module.sh: no C compiler (cc, gcc or clang) found" >&2; exit 69; }

# libpam's headers (Debian and Ubuntu: libpam0g-dev; Fedora: pam-devel).
if [ ! -f /usr/include/security/pam_modules.h ]; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
        run apt-get update -qq
        run env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libpam0g-dev
    elif ! $dry_run; then
        echo "install-pam-module.sh: libpam's headers are missing:" \
             "install libpam0g-dev (Debian, Ubuntu) or pam-devel (Fedora)" >&2
        exit 69
    fi
fi

build() {
    run "$compiler" -shared -fPIC -O2 -Wall -Wextra -Werror -o "$1" "$source" -lpam
}

if [ -n "$output" ]; then
    run install -d -m 755 "$output"
    build "$output/pam_tpm_keychain.so"
    exit 0
fi

if ! $dry_run && [ "$(id -u)" -ne 0 ]; then
    echo "install-pam-module.sh: run it as root (it installs into the system's PAM module directory)" >&2
    exit 77
fi

# Where this system's PAM looks for modules named without a path.
multiarch=$("$compiler" -print-multiarch 2>/dev/null || true)
if [ -n "$multiarch" ] && [ -d "/lib/$multiarch/security" ]; then
    modules="/lib/$multiarch/security"
elif [ -d /lib64/security ]; then
    modules=/lib64/security
else
    modules=/lib/security
fi

staging=$(mktemp -d "${TMPDIR:-/tmp}/pam-tpm-keychain.XXXXXX")
trap 'rm -rf "$staging"' EXIT
build "$staging/pam_tpm_keychain.so"
run install -d -m 755 "$modules"
run install -o root -g root -m 644 "$staging/pam_tpm_keychain.so" "$modules/pam_tpm_keychain.so"
if $dry_run; then
    echo "Dry run: nothing was built or installed."
else
    echo "Installed $modules/pam_tpm_keychain.so."
    echo "Add its two lines to your login's PAM service (README, \"Unlock with your login\")."
fi

#!/usr/bin/env bash
# Builds the PKCS#11 module (Sources/PKCS11Module, C only: no Swift runtime enters the programs
# that load it) with cc, and registers it with p11-kit for this user, so that p11-kit's
# consumers (GnuTLS's p11tool, curl, OpenVPN, Firefox and Chromium through p11-kit-proxy) see the
# keychain's SSH keys as a token. The module signs through tpm-keychain-ssh-agent, which must run.
#
#   Scripts/install-pkcs11-module.sh [--prefix DIR] [--output DIR] [--dry-run]
#
# --prefix DIR (default ~/.local): installs lib/tpm-keychain/libtpm-keychain-pkcs11.so and
#   ~/.config/pkcs11/modules/tpm-keychain.module (p11-kit's per-user module list).
# --output DIR: only builds DIR/libtpm-keychain-pkcs11.so (what the tests do).
set -euo pipefail

prefix="${HOME:?HOME is not set}/.local"
output=
dry_run=false
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) prefix="$2"; shift 2 ;;
        --output) output="$2"; shift 2 ;;
        --dry-run) dry_run=true; shift ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        *) echo "install-pkcs11-module.sh: unknown argument: $1" >&2; exit 64 ;;
    esac
done

run() {
    printf '+'; printf ' %q' "$@"; printf '\n'
    if ! $dry_run; then "$@"; fi
}

cd "$(dirname "$0")/.."

# The C compiler: $CC, else cc, gcc or clang (a Swift toolchain brings clang).
compiler=${CC:-}
if [ -z "$compiler" ]; then
    for candidate in cc gcc clang; do
        if command -v "$candidate" >/dev/null; then compiler=$candidate; break; fi
    done
fi
[ -n "$compiler" ] || { echo "install-pkcs11-module.sh: no C compiler (cc, gcc or clang) found" >&2; exit 69; }

# p11-kit's pkcs11.h (Debian and Ubuntu: libp11-kit-dev; Fedora: p11-kit-devel).
if [ ! -f /usr/include/p11-kit-1/p11-kit/pkcs11.h ]; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
        run apt-get update -qq
        run env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libp11-kit-dev
    elif ! $dry_run; then
        echo "install-pkcs11-module.sh: p11-kit's headers are missing: install libp11-kit-dev (Debian, Ubuntu) or p11-kit-devel (Fedora)" >&2
        exit 69
    fi
fi

build() {
    run "$compiler" -shared -fPIC -O2 -Wall -Wextra -Werror -D_GNU_SOURCE -fvisibility=default \
        -o "$1" Sources/PKCS11Module/AgentClient.c Sources/PKCS11Module/Module.c Sources/PKCS11Module/FunctionList.c
}

if [ -n "$output" ]; then
    run install -d -m 755 "$output"
    build "$output/libtpm-keychain-pkcs11.so"
    exit 0
fi

library_dir="$prefix/lib/tpm-keychain"
module_dir="${XDG_CONFIG_HOME:-$HOME/.config}/pkcs11/modules"
run install -d -m 755 "$library_dir" "$module_dir"
build "$library_dir/libtpm-keychain-pkcs11.so"
if $dry_run; then
    echo "+ write $module_dir/tpm-keychain.module"
else
    printf 'module: %s\n# The keychain'"'"'s TPM keys, signed through tpm-keychain-ssh-agent.\n' \
        "$library_dir/libtpm-keychain-pkcs11.so" > "$module_dir/tpm-keychain.module"
    echo "Installed the PKCS#11 module; p11-kit lists it as tpm-keychain (p11-kit list-modules)."
fi

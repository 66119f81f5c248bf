#!/usr/bin/env bash
# Builds tpm-keychain for release and installs it with its man page and shell completions.
#
#   Scripts/install-cli.sh [--prefix DIR] [--dry-run]
#
# Installs, under the prefix (default ~/.local):
#   bin/tpm-keychain                                   built with the Swift runtime linked in
#   bin/tpm-keychain-secret-service                    the same; `tpm-keychain secret-service` runs it
#   bin/tpm-keychain-keys                              the same; `tpm-keychain key` runs it
#   bin/tpm-keychain-ssh-agent                         the same; the ssh agent over TPM keys tagged ssh
#   bin/tpm-keychain-passkeys                          the same; the passkey (FIDO2) authenticator
#   share/man/man1/tpm-keychain.1                      swift-argument-parser's generate-manual plugin
#   share/bash-completion/completions/tpm-keychain     tpm-keychain --generate-completion-script bash
#   share/zsh/site-functions/_tpm-keychain             ... zsh
#   share/fish/vendor_completions.d/tpm-keychain.fish  ... fish
# and with --secret-service (makes tpm-keychain the desktop's keyring; see README.md):
#   share/dbus-1/services/org.freedesktop.secrets.service  D-Bus activation of `tpm-keychain secret-service`
#   share/systemd/user/tpm-keychain-secrets.service        the same as a systemd user service
# and with --portal (also the Secret portal's backend for sandboxed apps; implies --secret-service):
#   share/xdg-desktop-portal/portals/tpmkeychain.portal    what xdg-desktop-portal reads (it reads
#                                                           /usr/share only: use --prefix /usr)
#   share/dbus-1/services/org.freedesktop.impl.portal.desktop.tpmkeychain.service
# and with --ssh-agent:
#   share/systemd/user/tpm-keychain-ssh-agent.service      the ssh agent as a systemd user service
#   share/systemd/user/tpm-keychain-ssh-agent.socket       its socket: the agent starts on first use
# and with --session-holder (lookups without TPM commands inside a login session):
#   share/systemd/user/tpm-keychain-session.service        `tpm-keychain hold-session` as a user service
#   share/systemd/user/tpm-keychain-session.socket         its socket: the holder starts on the first lookup
#
# The man page and the completions are generated from the command's ArgumentParser definitions,
# so they always match the binary. --dry-run prints the commands and runs none of them.
#
# About the man page: the GenerateManual plugin of swift-argument-parser 1.8 has no option to
# pick a product. It builds every product of the package in release mode (without
# --static-swift-stdlib), runs `generate-manual` on each executable that uses ArgumentParser
# (here only tpm-keychain) and writes the pages into its own work directory under .build, so it
# needs no --allow-writing-to-package-directory. The first run therefore takes a few minutes.
# It runs before the static build, so the binary left in .build/release and installed is the one
# with the Swift runtime linked in.
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: Scripts/install-cli.sh [--prefix DIR] [--secret-service] [--portal] [--ssh-agent] [--session-holder] [--dry-run]

  --prefix DIR   where to install (default: ~/.local): bin/, share/man/man1/,
                 share/bash-completion/completions/, share/zsh/site-functions/,
                 share/fish/vendor_completions.d/
  --secret-service
                 also install the D-Bus activation file and systemd user unit that make
                 `tpm-keychain secret-service` the session's org.freedesktop.secrets
  --portal       also make the daemon the Secret portal's backend (xdg-desktop-portal reads its
                 portal file from /usr/share only: with --prefix /usr); implies --secret-service
  --ssh-agent    also install the systemd user units (socket and service) of tpm-keychain-ssh-agent
  --session-holder
                 also install the systemd user units (socket and service) of
                 `tpm-keychain hold-session`, which answers lookups without TPM commands
  --dry-run      print what would be run, build and install nothing
  -h, --help     this text
EOF
}

prefix="${HOME:?HOME is not set}/.local"
dry_run=false
secret_service=false
portal=false
ssh_agent=false
session_holder=false
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix)
            [ $# -ge 2 ] && [ -n "$2" ] || { echo "install-cli.sh: --prefix needs a directory" >&2; exit 64; }
            prefix="$2"; shift 2 ;;
        --prefix=*)
            prefix="${1#--prefix=}"
            [ -n "$prefix" ] || { echo "install-cli.sh: --prefix needs a directory" >&2; exit 64; }
            shift ;;
        --dry-run) dry_run=true; shift ;;
        --secret-service) secret_service=true; shift ;;
        --portal) portal=true; secret_service=true; shift ;;
        --ssh-agent) ssh_agent=true; shift ;;
        --session-holder) session_holder=true; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "install-cli.sh: unknown argument: $1" >&2; usage >&2; exit 64 ;;
    esac
done
case "$prefix" in
    /*) ;;
    *) prefix="$PWD/$prefix" ;;   # relative to where the script was called from
esac

cd "$(dirname "$0")/.."

# Runs a command, or only shows it with --dry-run.
run() {
    printf '+'; printf ' %q' "$@"; printf '\n'
    if ! $dry_run; then "$@"; fi
}

bin_dir="$prefix/bin"
man_dir="$prefix/share/man/man1"
bash_dir="$prefix/share/bash-completion/completions"
zsh_dir="$prefix/share/zsh/site-functions"
fish_dir="$prefix/share/fish/vendor_completions.d"

staging=$(mktemp -d "${TMPDIR:-/tmp}/tpm-keychain-install.XXXXXX")
trap 'rm -rf "$staging"' EXIT

# 1. The man page, through the plugin (see the header). The date is the last commit's, so the
#    page does not change from one run to the next.
manual_options=()
if date=$(git log -1 --format=%cs 2>/dev/null) && [ -n "$date" ]; then
    manual_options+=(--date "$date")
fi
if $dry_run; then
    run swift package plugin generate-manual "${manual_options[@]}"
    manual_page=.build/plugins/GenerateManual/outputs/tpm-keychain/tpm-keychain.1
else
    printf '+ swift package plugin generate-manual %s\n' "${manual_options[*]}"
    swift package plugin generate-manual "${manual_options[@]}" | tee "$staging/generate-manual.log"
    # The plugin says where it wrote the page: "Generated manual in 'file:///…/tpm-keychain/'".
    manual_directory=$(sed -n "s|^Generated manual in '\(file://\)\{0,1\}\(.*/tpm-keychain/\{0,1\}\)'\$|\2|p" \
        "$staging/generate-manual.log" | tail -n 1)
    manual_page="${manual_directory%/}/tpm-keychain.1"
    [ -n "$manual_directory" ] && [ -f "$manual_page" ] || {
        echo "install-cli.sh: the generate-manual plugin did not report tpm-keychain.1" >&2; exit 1; }
fi

# 2. The binary, with the Swift runtime linked in (it halves the start-up time).
run Scripts/release-build.sh --product tpm-keychain
run Scripts/release-build.sh --product tpm-keychain-secret-service
run Scripts/release-build.sh --product tpm-keychain-keys
run Scripts/release-build.sh --product tpm-keychain-ssh-agent
run Scripts/release-build.sh --product tpm-keychain-passkeys
if $dry_run; then
    binary=.build/release/tpm-keychain
else
    binary="$(Scripts/release-build.sh --show-bin-path)/tpm-keychain"
    [ -x "$binary" ] || { echo "install-cli.sh: $binary was not built" >&2; exit 1; }
fi
daemon="$(dirname "$binary")/tpm-keychain-secret-service"
keys="$(dirname "$binary")/tpm-keychain-keys"
agent="$(dirname "$binary")/tpm-keychain-ssh-agent"
passkeys="$(dirname "$binary")/tpm-keychain-passkeys"

# 3. Completion scripts, from the binary just built.
for shell in bash zsh fish; do
    if $dry_run; then
        printf '+ %q --generate-completion-script %s > %q\n' "$binary" "$shell" "$staging/tpm-keychain.$shell"
    else
        printf '+ %q --generate-completion-script %s\n' "$binary" "$shell"
        "$binary" --generate-completion-script "$shell" > "$staging/tpm-keychain.$shell"
        [ -s "$staging/tpm-keychain.$shell" ] || {
            echo "install-cli.sh: the $shell completion script is empty" >&2; exit 1; }
    fi
done

# 4. Install.
run install -d -m 755 "$bin_dir" "$man_dir" "$bash_dir" "$zsh_dir" "$fish_dir"
run install -m 755 "$binary" "$bin_dir/tpm-keychain"
run install -m 755 "$daemon" "$bin_dir/tpm-keychain-secret-service"
run install -m 755 "$keys" "$bin_dir/tpm-keychain-keys"
run install -m 755 "$agent" "$bin_dir/tpm-keychain-ssh-agent"
run install -m 755 "$passkeys" "$bin_dir/tpm-keychain-passkeys"
run install -m 644 "$manual_page" "$man_dir/tpm-keychain.1"
run install -m 644 "$staging/tpm-keychain.bash" "$bash_dir/tpm-keychain"
run install -m 644 "$staging/tpm-keychain.zsh" "$zsh_dir/_tpm-keychain"
run install -m 644 "$staging/tpm-keychain.fish" "$fish_dir/tpm-keychain.fish"

# 5. The Secret Service provider, when asked: activation file and user unit, pointing at bin/.
if $secret_service; then
    dbus_dir="$prefix/share/dbus-1/services"
    unit_dir="$prefix/share/systemd/user"
    # With --portal the one daemon serves both names, whichever starts it.
    daemon_arguments=""
    if $portal; then daemon_arguments=" --portal"; fi
    for template in org.freedesktop.secrets.service tpm-keychain-secrets.service; do
        sed -e "s|@BINDIR@|$bin_dir|g" -e "s|tpm-keychain secret-service\$|tpm-keychain secret-service$daemon_arguments|" \
            "Scripts/secret-service/$template.in" > "$staging/$template"
    done
    run install -d -m 755 "$dbus_dir" "$unit_dir"
    run install -m 644 "$staging/org.freedesktop.secrets.service" "$dbus_dir/org.freedesktop.secrets.service"
    run install -m 644 "$staging/tpm-keychain-secrets.service" "$unit_dir/tpm-keychain-secrets.service"
    if $portal; then
        portal_dir="$prefix/share/xdg-desktop-portal/portals"
        template=org.freedesktop.impl.portal.desktop.tpmkeychain.service
        sed "s|@BINDIR@|$bin_dir|g" "Scripts/secret-portal/$template.in" > "$staging/$template"
        run install -d -m 755 "$portal_dir"
        run install -m 644 Scripts/secret-portal/tpmkeychain.portal "$portal_dir/tpmkeychain.portal"
        run install -m 644 "$staging/$template" "$dbus_dir/$template"
    fi
fi

# 6. The ssh agent's user unit, when asked.
if $ssh_agent; then
    unit_dir="$prefix/share/systemd/user"
    sed "s|@BINDIR@|$bin_dir|g" Scripts/ssh-agent/tpm-keychain-ssh-agent.service.in > "$staging/tpm-keychain-ssh-agent.service"
    run install -d -m 755 "$unit_dir"
    run install -m 644 "$staging/tpm-keychain-ssh-agent.service" "$unit_dir/tpm-keychain-ssh-agent.service"
    run install -m 644 Scripts/ssh-agent/tpm-keychain-ssh-agent.socket "$unit_dir/tpm-keychain-ssh-agent.socket"
fi

# 7. The session holder's user units, when asked.
if $session_holder; then
    unit_dir="$prefix/share/systemd/user"
    sed "s|@BINDIR@|$bin_dir|g" Scripts/session-holder/tpm-keychain-session.service.in > "$staging/tpm-keychain-session.service"
    run install -d -m 755 "$unit_dir"
    run install -m 644 "$staging/tpm-keychain-session.service" "$unit_dir/tpm-keychain-session.service"
    run install -m 644 Scripts/session-holder/tpm-keychain-session.socket "$unit_dir/tpm-keychain-session.socket"
fi

if $dry_run; then
    echo "Dry run: nothing was built or installed."
else
    echo "Installed tpm-keychain under $prefix."
    case ":$PATH:" in
        *":$bin_dir:"*) ;;
        *) echo "Note: $bin_dir is not on PATH." ;;
    esac
fi

#!/usr/bin/env bash
# The Secret Service benchmark of docs/PERFORMANCE.md: our daemon against gnome-keyring-daemon,
# interleaved, at 100 and 1,000 items (lookups, GetSecret beside a Peer.Ping to the same daemon,
# searches, resident memory after the fill); then ours alone at 10,000 and 100,000.
#
#     Scripts/benchmark-secret-service.sh [--quick]      (--quick: 100 and 1,000 only)
#
# Builds the CLI as it ships (Scripts/release-build.sh, in .build-static), then runs
# Tests/Benchmarks/SecretService/bench.py: each provider on its own private dbus-daemon and HOME,
# the same items, and every measurement alternated between the providers in small batches (this
# machine's speed drifts within minutes). Needs gnome-keyring, secret-tool and python3-dbus
# (.ci/install-dependencies installs them). The stores use a private swtpm the daemon starts.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in gnome-keyring-daemon secret-tool dbus-daemon swtpm; do
    command -v "$tool" >/dev/null || { echo "benchmark-secret-service.sh: $tool is required" >&2; exit 1; }
done
Scripts/release-build.sh --scratch-path .build-static --product tpm-keychain >&2
Scripts/release-build.sh --scratch-path .build-static --product tpm-keychain-secret-service >&2
# --allow-simulated: without a TPM device here, the daemon keeps its collections on the swtpm it starts.
ours="$PWD/.build-static/release/tpm-keychain secret-service --allow-simulated --address {address} --data-directory {home}/tpm-keychain"
echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u +%Y-%m-%d), $(nproc) cores"
/usr/bin/python3 Tests/Benchmarks/SecretService/bench.py --items 100,1000 --batches 10 --batch-size 20 \
    --provider gnome='gnome-keyring-daemon --foreground --components=secrets --unlock' --provider ours="$ours"
if [ "${1:-}" != "--quick" ]; then
    /usr/bin/python3 Tests/Benchmarks/SecretService/bench.py --items 10000,100000 --batches 6 --batch-size 20 \
        --only ours --provider ours="$ours"
fi

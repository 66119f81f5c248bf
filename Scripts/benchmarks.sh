#!/usr/bin/env bash
# Builds what the benchmarks need and runs them: every table of docs/PERFORMANCE.md from one command
# (with every suite, the Secret Service's too: Scripts/benchmark-secret-service.sh --quick, our daemon
# against gnome-keyring at 100 and 1,000 items, its resident memory, and GetSecret beside a
# Peer.Ping to the same daemon).
#
#     Scripts/benchmarks.sh [SUITE] [iterations]      (no SUITE: every suite)
#     Scripts/benchmarks.sh secret-service             (the Secret Service's alone)
#
# Builds the C floor (ESAPIFloor) and TPMBenchmarks in release mode, and the CLI and the git helper
# as they ship (Scripts/release-build.sh, in .build-static), then runs TPMBenchmarks with
# TPM_KEYCHAIN_CLI and TPM_KEYCHAIN_GIT_HELPER set to them. Fails, rather than skipping a suite, when tpm2-tools or systemd-creds is missing.
# The store and access suites also redraw docs/performance.svg (Scripts/plot-benchmarks.py): gets
# against the number of items, and each cold path under the swtpm, firmware and discrete profiles.
# SwiftPM builds one --product per invocation, hence four builds.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = secret-service ]; then exec Scripts/benchmark-secret-service.sh --quick; fi
for tool in swtpm tpm2_unseal systemd-creds; do
    command -v "$tool" >/dev/null || { echo "benchmarks.sh: $tool is required (.ci/install-dependencies installs it)" >&2; exit 1; }
done
swift build -c release --product ESAPIFloor >&2
swift build -c release --product TPMBenchmarks >&2
Scripts/release-build.sh --scratch-path .build-static --product tpm-keychain >&2
Scripts/release-build.sh --scratch-path .build-static --product git-credential-tpm-keychain >&2
commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
echo "commit: $commit, $(date -u +%Y-%m-%d)"
# The store and access suites leave their figures here for the plot (docs/performance.svg).
data="$PWD/.build/benchmark-data"
rm -rf "$data"
TPM_KEYCHAIN_BENCH_DATA="$data" TPM_KEYCHAIN_CLI="$PWD/.build-static/release/tpm-keychain" \
    TPM_KEYCHAIN_GIT_HELPER="$PWD/.build-static/release/git-credential-tpm-keychain" .build/release/TPMBenchmarks "$@"
if [ -e "$data/gets-by-item-count.tsv" ] || [ -e "$data/cold-paths-rm.tsv" ]; then
    machine="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores"
    python3 Scripts/plot-benchmarks.py "$data" docs/performance.svg \
        "Scripts/benchmarks.sh ${*:-all}, commit $commit, $(date -u +%Y-%m-%d); $machine; swtpm, firmware and discrete profiles (TPMLatencyProfile)"
fi
if [ $# -eq 0 ] || [ "$1" = all ]; then
    Scripts/benchmark-secret-service.sh --quick
fi

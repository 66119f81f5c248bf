#!/usr/bin/env bash
# Fuzzes every parser of untrusted bytes with libFuzzer and AddressSanitizer.
#
#     Scripts/fuzz.sh [executions per target] [target...]
#
# Builds tpm-keychain-fuzz (Tests/Fuzz) with -sanitize=fuzzer,address into .build-fuzz, then runs
# each target for the given number of executions (default 1,500,000) from its seed corpus in
# Fixtures/fuzz/<target>/. New corpus entries go to .build-fuzz/corpus/<target>/, crashes to
# .build-fuzz/crashes/. Prints one line per target: executions, coverage, crashes. Exits 1 if
# any target crashed. docs/SECURITY.md records the last run.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-1500000}
shift || true
swift build -c release --scratch-path .build-fuzz \
    -Xswiftc -sanitize=fuzzer,address -Xswiftc -DFUZZING -Xcc -DFUZZING -Xswiftc -use-ld=lld \
    --product tpm-keychain-fuzz >&2
binary=.build-fuzz/release/tpm-keychain-fuzz
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(ls Fixtures/fuzz)
fi
mkdir -p .build-fuzz/crashes
failed=0
total=0
for target in "${targets[@]}"; do
    corpus=.build-fuzz/corpus/$target
    mkdir -p "$corpus"
    log=.build-fuzz/$target.log
    started=$(date +%s)
    if FUZZ_TARGET=$target "$binary" -runs="$runs" -max_len=16384 -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix=".build-fuzz/crashes/$target-" "$corpus" "Fixtures/fuzz/$target" >"$log" 2>&1; then
        outcome="no crash"
    else
        outcome="CRASH (see $log and .build-fuzz/crashes/)"
        failed=1
    fi
    executions=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
    coverage=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 || true)
    total=$((total + executions))
    echo "$target: $executions executions in $(( $(date +%s) - started )) s, $coverage, $outcome"
done
echo "total: $total executions"
exit $failed

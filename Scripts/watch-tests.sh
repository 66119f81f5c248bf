#!/usr/bin/env bash
# Runs the test suite and, the first time no test finishes for a while, records what every thread
# of the test process is doing: for the intermittent stall in which both threads of the test
# runner's cooperative pool (2 on a 2-core machine) sit in long blocking waits and no test
# progresses for minutes.
#
#     Scripts/watch-tests.sh [seconds without progress, default 60] [extra swift test arguments]
#
# Writes the test output to .build/watch-tests.log and, on a stall, .build/watch-tests-stall.txt:
# the processes (swtpm, dbus-daemon, the stress writer), the loopback connections, and each
# thread's stack (gdb). Needs a build (`swift build --build-tests`) and gdb.
set -euo pipefail
cd "$(dirname "$0")/.."
quiet=${1:-60}
shift || true
command -v gdb >/dev/null || { echo "watch-tests.sh: gdb is required" >&2; exit 1; }
log=.build/watch-tests.log
dump=.build/watch-tests-stall.txt
rm -f "$dump"
TPM_KEYCHAIN_TIMEOUT=${TPM_KEYCHAIN_TIMEOUT:-300} swift test --skip-build "$@" >"$log" 2>&1 &
runner=$!
last=-1
still=0
while kill -0 "$runner" 2>/dev/null; do
    sleep 5
    finished=$(grep -cE "(passed|failed) after|Test Case .* (passed|failed)" "$log" || true)
    if [ "$finished" -gt 0 ] && [ "$finished" = "$last" ]; then still=$((still + 5)); else still=0; last=$finished; fi
    if [ "$still" -ge "$quiet" ] && [ ! -f "$dump" ]; then
        pid=$(pgrep -f 'PackageTests.xctest' | head -1 || true)
        {
            date
            echo "no test finished for $still s; $finished finished so far"
            ps -eo pid,ppid,stat,etime,args | grep -E 'swtpm|xctest|tpm-keychain|dbus|python' | grep -v grep
            ss -tanp | grep -v LISTEN | grep -v TIME-WAIT
            [ -n "$pid" ] && timeout 120 gdb -p "$pid" -batch -ex 'thread apply all bt 16' 2>/dev/null | grep -E '^Thread|^#'
        } >"$dump" 2>&1
        echo "watch-tests.sh: stall recorded in $dump" >&2
    fi
done
wait "$runner" && status=0 || status=$?
grep -E "Test run with" "$log" || true
exit "$status"

#!/usr/bin/env bash
# Runs the concurrency tests under ThreadSanitizer.
#
#     Scripts/tsan.sh [extra swift test arguments]
#
# Builds the tests with --sanitize=thread into .build-tsan (a separate scratch path: the normal
# build is untouched) and runs every test that shares state between threads, tasks or processes:
# the suites and tests tagged `.concurrency` (each test target's Tags.swift), so a new one is
# covered by tagging it. TSan reports a race as a failure of the run (TSAN_OPTIONS
# halt_on_error=1). Slow to build (the whole package and swift-crypto with instrumentation), so
# not part of every CI run; docs/SECURITY.md records the last result.
set -euo pipefail
cd "$(dirname "$0")/.."
# The filter is read off the sources: Swift 6.3's `swift test` has no `--filter tag:` yet.
filter=$(python3 - <<'PYTHON'
import pathlib, re
tagged = re.compile(r"@(?:Suite|Test)\([^\n]*?\.tags\([^)]*\.concurrency[^)]*\)\)\s*(?:struct|final class|func) (\w+)")
names = [m.group(1) for path in sorted(pathlib.Path("Tests").rglob("*.swift")) for m in tagged.finditer(path.read_text())]
print("|".join(names))
PYTHON
)
[ -n "$filter" ] || { echo "tsan.sh: no test carries the tag .concurrency" >&2; exit 1; }
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
swift build --build-tests --sanitize=thread --scratch-path .build-tsan >&2
swift test --skip-build --sanitize=thread --scratch-path .build-tsan --filter "$filter" "$@"

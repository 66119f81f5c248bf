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
# A suite or test carries the tag when `.concurrency` is in its @Suite/@Test attribute; the
# declaration that follows the tag is the one tagged.
tag = re.compile(r"\.tags\([^)]*\.concurrency[^)]*\)")
following = re.compile(r"\b(struct|class|func) (\w+)")
top_level = re.compile(r"^(?:@Suite\b[^\n]*?\s)?(?:final )?(?:struct|class|enum|extension) (\w+)", re.M)
names = []
for path in sorted(pathlib.Path("Tests").rglob("*.swift")):
    text = path.read_text()
    for match in tag.finditer(text):
        kind, name = following.search(text, match.end()).groups()
        if kind == "func":
            suite = [m.group(1) for m in top_level.finditer(text, 0, match.start())][-1]
            names.append(suite + "/" + name + r"\(")
        else:
            names.append(name + "/")
print("|".join(names))
PYTHON
)
[ -n "$filter" ] || { echo "tsan.sh: no test carries the tag .concurrency" >&2; exit 1; }
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
swift build --build-tests --sanitize=thread --scratch-path .build-tsan >&2
swift test --skip-build --sanitize=thread --scratch-path .build-tsan --filter "$filter" "$@"

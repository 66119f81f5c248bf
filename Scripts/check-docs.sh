#!/usr/bin/env bash
# Builds the DocC documentation of TPMKeychain and TPMKeychainTesting and fails when
#   1. DocC reports any warning (a broken symbol link, an unresolved article, a bad Topics
#      section): swift-docc-plugin passes --warnings-as-errors on to `docc convert`; or
#   2. a public symbol declared in either target's sources has no doc comment of its own, or one
#      without a summary (a comment that is only `- Parameters:` or `- Throws:`).
#
#   Scripts/check-docs.sh
#
# Slow (it builds both targets and runs docc twice), so it is not part of `swift test`.
#
# Why (2) reads the symbol graph rather than using DocC's own options, with Swift 6.3's docc and
# swift-docc-plugin 1.5:
# - `--analyze` adds notes about the catalogue, but none about a symbol without documentation.
# - `--experimental-documentation-coverage` writes documentation-coverage.json, but it never
#   fails the build, and it reports as undocumented members no one can comment, which it does not
#   tell apart from ours: the `!=`, `hashValue`, `init(from:)` and `encode(to:)` the compiler
#   synthesises or the standard library provides (dozens in TPMKeychain alone).
# The symbol graph the plugin extracts for docc (the one printed as "target symbol graph
# directory path" with --verbose) has what is needed: each symbol's source location (absent for
# synthesised ones) and its doc comment, with the module and file the comment was written in.
# A symbol with a location counts as documented when it has a comment written just above it
# (not inherited from a protocol) whose first line is a summary. Extension blocks (`extension
# Foo { ... }` of another module's type) are containers and are skipped; their members are
# checked.
set -euo pipefail
cd "$(dirname "$0")/.."

targets=(TPMKeychain TPMKeychainTesting)
command -v python3 >/dev/null || { echo "check-docs.sh: python3 is required" >&2; exit 1; }

log=$(mktemp "${TMPDIR:-/tmp}/check-docs.XXXXXX")
trap 'rm -f "$log"' EXIT

target_options=()
for target in "${targets[@]}"; do target_options+=(--target "$target"); done

echo "+ swift package generate-documentation ${target_options[*]} --warnings-as-errors --verbose"
status=0
swift package generate-documentation "${target_options[@]}" --warnings-as-errors --verbose 2>&1 \
    | tee "$log" | grep -v -e '^docc invocation:' -e '^symbol graph options:' || status=$?
if [ "$status" -ne 0 ] || grep -q -e "^error: 'docc convert' invocation failed" "$log"; then
    echo "check-docs.sh: the documentation does not build without warnings (see above)" >&2
    exit 1
fi

mapfile -t graph_directories < <(sed -n "s/^target symbol graph directory path: '\(.*\)'\$/\1/p" "$log")
if [ "${#graph_directories[@]}" -ne "${#targets[@]}" ]; then
    echo "check-docs.sh: expected ${#targets[@]} symbol graph directories in the plugin's output, found ${#graph_directories[@]}" >&2
    exit 1
fi

python3 - "${targets[*]}" "${graph_directories[@]}" <<'PYTHON'
import glob, json, os, re, sys

expected = set(sys.argv[1].split())
# Field lists and callouts are not a summary.
FIELD = re.compile(r"^[-*+]\s+(parameters?|parameter\s+\S+|returns|throws|important|note|warning|"
                   r"precondition|postcondition|complexity|requires|seealso|tip|attention|"
                   r"experiment|bug|invariant|todo)\b", re.IGNORECASE)
problems = []  # ((file, line), message)
checked = {}
for directory in sys.argv[2:]:
    for path in sorted(glob.glob(os.path.join(directory, "*.symbols.json"))):
        with open(path) as file:
            graph = json.load(file)
        module = graph["module"]["name"]
        if module not in expected:
            continue
        for symbol in graph["symbols"]:
            location = symbol.get("location")
            if location is None or symbol["kind"]["identifier"] == "swift.extension":
                continue  # synthesised and inherited members have no location; extension blocks are containers
            checked[module] = checked.get(module, 0) + 1
            uri = location["uri"]
            file_name = uri.split("/Sources/", 1)[-1]
            line_number = location["position"]["line"] + 1
            subject = "%s:%d: %s %s" % (file_name, line_number, symbol["kind"]["displayName"],
                                        ".".join(symbol["pathComponents"]))

            def report(problem):
                problems.append(((file_name, line_number), "%s %s" % (subject, problem)))

            comment = symbol.get("docComment")
            if comment is None:
                report("has no doc comment")
                continue
            if comment.get("module", module) != module:
                report("has no doc comment of its own (DocC would show %s's)" % comment["module"])
                continue
            # A comment inherited from a protocol of the same module sits elsewhere.
            lines = comment.get("lines", [])
            last_line = max((line["range"]["end"]["line"] for line in lines if "range" in line), default=-1)
            if comment.get("uri", uri) != uri or last_line >= location["position"]["line"]:
                report("has no doc comment of its own (it inherits its protocol's)")
                continue
            first = next((line["text"].strip() for line in lines if line["text"].strip()), "")
            if not first or FIELD.match(first):
                report("has a doc comment without a summary line")

missing = expected - set(checked)
if missing:
    print("check-docs.sh: no symbol graph read for %s" % ", ".join(sorted(missing)), file=sys.stderr)
    sys.exit(1)
for _, problem in sorted(problems):
    print(problem, file=sys.stderr)
if problems:
    print("check-docs.sh: %d public symbol(s) need documentation" % len(problems), file=sys.stderr)
    sys.exit(1)
print("check-docs.sh: every public symbol is documented (%s)"
      % ", ".join("%s: %d" % (module, count) for module, count in sorted(checked.items())))
PYTHON
echo "check-docs.sh: documentation builds without warnings"

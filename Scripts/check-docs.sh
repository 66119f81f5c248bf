#!/usr/bin/env bash
# Builds the DocC documentation of TPMKeychain and TPMKeychainTesting and fails when
#   1. DocC reports any warning (a broken symbol link, an unresolved article, a bad Topics
#      section): `docc convert --warnings-as-errors` over symbol graphs this script extracts,
#      with the modules each target re-exports (TPMKeychain's vocabulary and service) included; or
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
# The symbol graph extracted for docc has what is needed: each symbol's source location (absent for
# synthesised ones) and its doc comment, with the module and file the comment was written in.
# A symbol with a location counts as documented when it has a comment written just above it
# (not inherited from a protocol) whose first line is a summary. Extension blocks (`extension
# Foo { ... }` of another module's type) are containers and are skipped; their members are
# checked.
set -euo pipefail
cd "$(dirname "$0")/.."

targets=(TPMKeychain TPMKeychainTesting)
# What each target re-exports (`@_exported import`): its symbols are documented with the target's.
declare -A reexported=([TPMKeychain]=KeychainVocabulary,KeychainService,KeychainTransfer [TPMKeychainTesting]=TPMSimulator)
command -v python3 >/dev/null || { echo "check-docs.sh: python3 is required" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/check-docs.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The symbol graphs are extracted here rather than by swift-docc-plugin, because the plugin
# cannot pass -experimental-allowed-reexported-modules, without which TPMKeychain's graph leaves
# out KeychainError, AccessControl and the rest of the vocabulary it re-exports.
for target in "${targets[@]}"; do
    echo "+ swift build --target $target"
    swift build --target "$target" >&2
done
bin=$(swift build --show-bin-path)
graph_directories=()
for target in "${targets[@]}"; do
    graphs="$work/graphs/$target"
    mkdir -p "$graphs"
    swift-symbolgraph-extract -module-name "$target" -target "$(uname -m)-unknown-linux-gnu" \
        -I "$bin/Modules" -I Sources/CTSS2 -I Sources/CSystemdBus \
        -Xcc "-fmodule-map-file=$bin/CESAPICryptoContext.build/module.modulemap" -Xcc -I -Xcc Sources/CESAPICryptoContext/include \
        -Xcc "-fmodule-map-file=$bin/CSystemCalls.build/module.modulemap" -Xcc -I -Xcc Sources/CSystemCalls/include \
        -minimum-access-level public -skip-inherited-docs \
        "-experimental-allowed-reexported-modules=${reexported[$target]}" -output-dir "$graphs"
    echo "+ docc convert Sources/$target/$target.docc --warnings-as-errors"
    if ! docc convert "Sources/$target/$target.docc" --additional-symbol-graph-dir "$graphs" \
        --fallback-display-name "$target" --fallback-bundle-identifier "$target" \
        --warnings-as-errors --output-path "$work/$target.doccarchive" >"$work/docc-$target.log" 2>&1; then
        cat "$work/docc-$target.log" >&2
        echo "check-docs.sh: the documentation of $target does not build without warnings (see above)" >&2
        exit 1
    fi
    graph_directories+=("$graphs")
done

python3 - "${targets[*]}" "${graph_directories[@]}" <<'PYTHON'
import glob, json, os, re, sys

expected = set(sys.argv[1].split())
REEXPORTED = {"TPMKeychain": {"KeychainVocabulary", "KeychainService", "KeychainTransfer"}, "TPMKeychainTesting": {"TPMSimulator"}}
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
            if comment.get("module", module) not in {module} | REEXPORTED.get(module, set()):
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

#!/usr/bin/env bash
# Writes Fixtures/store-v2: a small store in format version 2 together with the swtpm state its
# master key is sealed to. FormatUpgradeTests opens a copy of it and reads every item in
# expected.json: the guard that later versions still read the stores format 2 wrote.
#
# Do not regenerate it casually: the point is that it was written by the version that introduced
# format 2. Run from anywhere, with no hardware TPM and TPM_KEYCHAIN_TCTI unset, so that the CLI's
# embedded swtpm keeps its state in store/swtpm:
#     swift build --product tpm-keychain && Fixtures/store-v2/make.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cli="${CLI:-$here/../../.build/debug/tpm-keychain}"
unset TPM_KEYCHAIN_TCTI
rm -rf "$here/store"
"$cli" add-generic-password --keychain "$here/store" -s com.example.fixture -a alice -l 'Alice' \
    -j 'written by format version 2' <<< 'alice-password-v2' 2>/dev/null
"$cli" add-generic-password --keychain "$here/store" -s com.example.fixture -a bob <<< 'bob-password-v2' 2>/dev/null
"$cli" add-generic-password --keychain "$here/store" -s com.example.other -a 'token' <<< 'tøken-v2 ✓' 2>/dev/null
# Only what a store needs: no locks, logs, PID files or cached TPM contexts.
find "$here/store" \( -name '*.lock' -o -name '.lock' -o -name '*.log' -o -name '*.pid' -o -name 'storage-key.context' \) -delete
ls -R "$here/store"

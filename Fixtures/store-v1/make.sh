#!/usr/bin/env bash
# Writes Fixtures/store-v1: a small store in format version 1 together with the swtpm state its
# master key is sealed to. StoreCompatibilityTests opens a copy of it and reads every item in
# expected.json: the guard that later versions still read today's stores.
#
# Do not regenerate it casually: the point is that it was written by the version that introduced
# format 1. Run from anywhere, with no hardware TPM and TPM_KEYCHAIN_TCTI unset, so that the CLI's
# embedded swtpm keeps its state in store/swtpm:
#     swift build --product tpm-keychain && Fixtures/store-v1/make.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cli="${CLI:-$here/../../.build/debug/tpm-keychain}"
unset TPM_KEYCHAIN_TCTI
rm -rf "$here/store"
"$cli" add-generic-password --keychain "$here/store" -s com.example.fixture -a alice -w 'alice-password-v1' \
    -l 'Alice' -j 'written by format version 1'
"$cli" add-generic-password --keychain "$here/store" -s com.example.fixture -a bob -w 'bob-password-v1'
"$cli" add-generic-password --keychain "$here/store" -s com.example.other -a 'token' -w 'tøken-v1 ✓'
# Only what a store needs: no locks, logs or PID files.
find "$here/store" \( -name '*.lock' -o -name '.lock' -o -name '*.log' -o -name '*.pid' \) -delete
ls -R "$here/store"

#!/usr/bin/env bash
# Builds an executable as it ships: `swift build` in release mode with the flags below, followed by
# this script's own arguments (for example `--product tpm-keychain`, `--scratch-path .build-static`,
# `--show-bin-path`). Every script that builds or measures a shipped binary goes through here.
#
# - --static-swift-stdlib: the Swift runtime and Foundation linked in, not loaded as shared
#   libraries: about half of a short command's start-up (docs/PERFORMANCE.md).
# - -disable-concrete-type-metadata-mangled-name-accessors (a frontend code-generation option):
#   code asks for a generic type's metadata through its accessor, with the conformances it needs
#   passed in, instead of through the type's mangled name. Resolving a mangled name looks each
#   conformance up at run time, and the first lookup of each in a process walks every conformance
#   record of the binary (about 7,600 in the CLI): 17 walks, about 2 ms of a 22 ms lookup. The
#   metadata is the same either way; the binary grows by about 0.2 %.
# - --disable-local-rpath: no `$ORIGIN` run path. With the Swift libraries linked in there is
#   nothing beside the binary to load, and the path only makes the dynamic linker look there
#   first for each system library (about 30 failed system calls per start).
# - -Xlinker --strip-debug: no DWARF in the shipped binary (25 of the CLI's 115 MB; what is left
#   of its size is in docs/PERFORMANCE.md). Function names stay in the symbol table, so a crash's
#   backtrace still names its frames; file and line need a build without this script.
set -euo pipefail
exec swift build -c release --static-swift-stdlib --disable-local-rpath \
    -Xswiftc -Xfrontend -Xswiftc -disable-concrete-type-metadata-mangled-name-accessors \
    -Xlinker --strip-debug "$@"

#!/usr/bin/env bash
# Fails when a Swift file does not read as `swift format` (the toolchain's swift-format, with the
# repository's .swift-format: 4 spaces, 120 columns) would write it. Part of the test command, so
# CI checks it on every run; fix a failure with
#
#     swift format format --in-place --recursive --parallel Package.swift Sources Tests
set -euo pipefail
cd "$(dirname "$0")/.."
swift format lint --strict --recursive --parallel Package.swift Sources Tests

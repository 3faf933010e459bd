#!/usr/bin/env bash
# test.sh — the README's test command: set up, build, and run every test (ctest).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
ctest --test-dir "${DS4_BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" --timeout 1800

#!/usr/bin/env bash
# The test command: set up a fresh machine if needed, build, run every suite.
# GPU suites report skipped (saying why) on a machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/bootstrap.sh
meson test -C build --print-errorlogs "$@"

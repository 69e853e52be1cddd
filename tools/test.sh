#!/usr/bin/env bash
# The test command: set up a fresh machine if needed, build, run every suite,
# then one line saying what was skipped and why (tools/test_summary.py). GPU
# suites report SKIP, saying why, on a machine without a GPU; a suite whose
# tests all skipped is a SKIP, never an OK.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/bootstrap.sh
status=0
meson test -C build --print-errorlogs "$@" || status=$?
python3 tools/test_summary.py build
exit "$status"

#!/bin/bash
# Build, test and benchmark on the GPU host in one call (see shared/device/README.md).
# Usage (from the project root, with .devdeps/.devtools/.golden carried):
#   tools/device-run.sh [tests|demo|cases|bench|bench-quick|all]...
# Logs go to $OUT (or ./device-out) so they come back with the call.
set -u
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
. .devtools/setup.sh
export MLAJIT_CACHE_DIR=/tmp/mlajit-cache
export MLAJIT_COMMIT=${MLAJIT_COMMIT:-$(cat .commit 2>/dev/null || echo unknown)}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/gpu.txt"
if [ ! -f build-gpu/build.ninja ]; then
  meson setup build-gpu --buildtype=release -Dgolden_dir="$PWD/.golden" >"$OUT/setup.log" 2>&1 || { tail -30 "$OUT/setup.log"; exit 1; }
fi
meson compile -C build-gpu >"$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head -30; exit 1; }
echo "build ok"
rc=0
for step in "${@:-all}"; do
  case $step in
    tests|all)
      meson test -C build-gpu --print-errorlogs --num-processes 4 >"$OUT/tests.log" 2>&1 || rc=1
      grep -E "^ *[0-9]+/[0-9]+ |^Ok|^Fail|Synthesis" "$OUT/tests.log"
      cp build-gpu/meson-logs/testlog.txt "$OUT/testlog.txt" 2>/dev/null ;;&
    demo|all)
      rm -rf /tmp/mlajit-demo-cache
      for i in 1 2; do MLAJIT_CACHE_DIR=/tmp/mlajit-demo-cache ./build-gpu/mlajit demo || rc=1; done 2>&1 | tee "$OUT/demo.log"
      ./build-gpu/embed_example 2>&1 | tee -a "$OUT/demo.log" ;;&
    cases|all)
      for d in .golden/*/; do ./build-gpu/mlajit run-case "$d" || rc=1; done >"$OUT/cases.log" 2>&1
      grep -E "^case|mlajit vs" "$OUT/cases.log" ;;&
    bench|all)
      ./build-gpu/mlajit bench --json "$OUT/h200.jsonl" 2>&1 | tee "$OUT/bench.log" || rc=1 ;;
    bench-quick)
      ./build-gpu/mlajit bench --quick --json "$OUT/h200.jsonl" 2>&1 | tee "$OUT/bench.log" || rc=1 ;;
  esac
done
exit $rc
